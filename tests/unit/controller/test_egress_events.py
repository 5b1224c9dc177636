"""The egress proxy's events reach the audit log and, when refused, the servers' metrics
(runner_egress_refusals_total counts observe's egress_refused)."""
from __future__ import annotations

from types import SimpleNamespace

from runner.controller.core import Runner
from runner.reporting import observe


class Audit:
    def __init__(self) -> None:
        self.records = []

    def record_egress(self, ev, **kw):
        self.records.append((ev, kw))


def test_a_refused_request_is_audited_and_counted_an_allowed_one_only_audited():
    seen = []
    stop = observe.listen(lambda kind, f: seen.append((kind, f)))
    runner = SimpleNamespace(audit=Audit(), session_id="s1", policy=SimpleNamespace(tenant="acme"))
    try:
        Runner._audit_egress(runner, {"event": "egress", "host": "api.example", "decision": "allowed"})
        Runner._audit_egress(runner, {"event": "egress", "host": "evil.example", "decision": "refused"})
        Runner._audit_egress(runner, {"event": "other"})
    finally:
        stop()
    assert [ev["host"] for ev, _ in runner.audit.records] == ["api.example", "evil.example"]
    assert all(kw == {"session": "s1", "tenant": "acme"} for _, kw in runner.audit.records)
    assert [(k, f) for k, f in seen if k == "egress_refused"] == [("egress_refused", {"tenant": "acme", "host": "evil.example"})]
