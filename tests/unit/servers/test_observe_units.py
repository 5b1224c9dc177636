"""The operator token (runner/servers/operator.py), the JSON log (runner/servers/logs.py), the
metrics' events and labels (runner/servers/metrics.py) and the controller's hooks
(runner/reporting/observe.py), without a server."""
from __future__ import annotations

import io
import json
import os

import pytest

from runner.reporting import observe
from runner.servers.logs import Log
from runner.servers.operator import TOKEN_FILE, OperatorAuth, bearer, from_loopback, token_for


def scope(client="127.0.0.1", headers=()):
    return {"type": "http", "client": (client, 5555) if client else None,
            "headers": [(k.encode(), v.encode()) for k, v in headers]}


def test_the_token_file_is_made_once_private_and_kept(tmp_path):
    t = token_for(tmp_path, environ={})
    assert len(t) == 64 and int(t, 16) >= 0
    assert os.stat(tmp_path / TOKEN_FILE).st_mode & 0o777 == 0o600
    assert token_for(tmp_path, environ={}) == t
    assert token_for(tmp_path, environ={"RUNNER_OPERATOR_TOKEN": "from-env"}) == "from-env"
    assert token_for(None, environ={}) is None


def test_the_token_file_is_never_read_through_a_link(tmp_path):
    secret = tmp_path / "elsewhere"
    secret.write_text("not the token\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / TOKEN_FILE).symlink_to(secret)
    with pytest.raises(OSError):
        token_for(tmp_path / "d", environ={})


@pytest.mark.parametrize("client,headers,allowed", [
    ("127.0.0.1", (), True),
    ("127.0.0.9", (), True),
    ("::1", (), True),
    ("10.1.2.3", (), False),
    ("203.0.113.5", (), False),
    (None, (), False),
    ("127.0.0.1", (("X-Forwarded-For", "203.0.113.5"),), False),
    ("127.0.0.1", (("forwarded", "for=203.0.113.5"),), False),
    ("127.0.0.1", (("Authorization", "Bearer wrong"),), False),  # a credential that is not the token: refused
    ("10.1.2.3", (("Authorization", "Bearer tok"),), True),
    ("10.1.2.3", (("Authorization", "bearer tok"),), True),
    ("10.1.2.3", (("Authorization", "Bearer tok"), ("Authorization", "Bearer tok")), False),  # two: none
    ("10.1.2.3", (("Authorization", "Basic tok"),), False),
])
def test_who_may_read_an_operator_route(client, headers, allowed):
    assert OperatorAuth("tok").allowed(scope(client, headers)) is allowed


def test_without_a_token_only_loopback_and_a_route_may_refuse_loopback():
    auth = OperatorAuth(None)
    assert auth.allowed(scope("127.0.0.1"))
    assert not auth.allowed(scope("10.0.0.1", (("Authorization", "Bearer "),)))
    assert not OperatorAuth("tok").allowed(scope("127.0.0.1"), loopback_ok=False)
    assert OperatorAuth("tok").allowed(scope("127.0.0.1", (("Authorization", "Bearer tok"),)), loopback_ok=False)
    assert bearer(scope(headers=(("Authorization", "Bearer  x "),))) == "x"
    assert from_loopback(scope("::ffff:127.0.0.1"))


def test_the_log_is_one_json_object_a_line_at_or_above_its_level():
    buf = io.StringIO()
    log = Log("runner serve", "json", "info", stream=buf)
    log.event("request", "GET /x 200", "info", route="/x", status=200, tenant=None)
    log.event("debugging", "no", "debug")
    log.warning("warning", "odd \u2028 \x1b[31m text")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and all(line.isascii() for line in lines)  # escapes: no terminal control reaches a reader
    first = json.loads(lines[0])
    assert first["event"] == "request" and first["status"] == 200 and "tenant" not in first
    assert list(first)[:3] == ["ts", "level", "event"] and list(first)[-1] == "msg"
    assert json.loads(lines[1])["msg"] == "odd \u2028 \x1b[31m text"
    text = io.StringIO()
    Log("runner serve", "text", "warning", stream=text).info("request", "GET /x 200")
    Log("runner serve", "text", "warning", stream=text).warning("warning", "careful")
    Log("runner serve", "text", "error", stream=text).event("listening", "listening on x", always=True)
    assert text.getvalue() == "runner serve: careful\nrunner serve: listening on x\n"
    with pytest.raises(ValueError):
        Log(fmt="xml")
    with pytest.raises(ValueError):
        Log(level="loud")


def test_hooks_are_nothing_without_a_listener_and_a_failing_listener_is_dropped():
    assert observe.span("x") is observe.span("y")  # the one do-nothing context
    seen = []
    stop = observe.listen(lambda kind, f: seen.append((kind, f)))
    stop_bad = observe.listen(lambda kind, f: 1 / 0)
    try:
        observe.emit("sandbox_started", tenant="t")
    finally:
        stop()
        stop_bad()
    observe.emit("sandbox_started", tenant="t")
    assert seen == [("sandbox_started", {"tenant": "t"})]


def test_metrics_count_events_and_cap_the_tool_labels_a_caller_chooses():
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from runner.servers.metrics import TOOL_LABELS, Metrics

    m = Metrics(sessions=lambda: [("t", "open", 2), ("t", "paused", 1)], live=lambda: {"t": 1})
    try:
        for i in range(TOOL_LABELS + 10):
            observe.emit("call_done", tenant="t", tool=f"made_up_{i}", seconds=0.01, error_type="validation")
        observe.emit("call_done", tenant="t", tool="bash\n{evil=\"1\"}", seconds=0.01, error_type=None)
        observe.emit("call_done", tenant="u", tool="bash", seconds=0.2, error_type=None)
        observe.emit("warm_pool", tenant="u", hit=True)
        observe.emit("warm_pool", tenant="u", hit=False)
        observe.emit("egress_refused", tenant="u", host="example.invalid")
        samples = {}
        for fam in text_string_to_metric_families(m.exposition().decode()):
            for s in fam.samples:
                samples.setdefault(s.name, []).append(s)
    finally:
        m.close()
    tools_of_t = {s.labels["tool"] for s in samples["runner_tool_calls_total"] if s.labels["tenant"] == "t"}
    assert len(tools_of_t) == TOOL_LABELS + 1 and "_other" in tools_of_t  # 64 names, then one bucket
    other = [s.value for s in samples["runner_tool_calls_total"] if s.labels["tool"] == "_other"]
    assert other == [11]  # 10 past the cap, and the name no label may carry
    assert [s.labels for s in samples["runner_tool_calls_total"] if s.labels["tenant"] == "u"] == [
        {"tenant": "u", "tool": "bash"}]
    assert [s.value for s in samples["runner_warm_pool_hits_total"]] == [1]
    assert [s.value for s in samples["runner_warm_pool_misses_total"]] == [1]
    assert [s.value for s in samples["runner_egress_refusals_total"]] == [1]
    assert {(s.labels["state"], s.value) for s in samples["runner_sessions"]} == {("open", 2), ("paused", 1)}
    assert [s.value for s in samples["runner_sessions_live"]] == [1]


def test_say_goes_to_the_servers_log_when_one_runs_else_to_stderr(capsys):
    observe.say("could not list containers: x")
    assert capsys.readouterr().err == "runner serve: could not list containers: x\n"
    buf = io.StringIO()
    log = Log("runner serve", "json", "info", stream=buf)
    observe.set_say(lambda text, level: log.event("warning", text, level))
    try:
        observe.say("kept network n: in use")
    finally:
        observe.set_say(None)
    assert capsys.readouterr().err == ""
    rec = json.loads(buf.getvalue())
    assert rec["level"] == "warning" and rec["msg"] == "kept network n: in use"


def test_a_line_logged_from_a_signal_handler_while_a_line_is_written_does_not_deadlock():
    """SIGTERM's handler logs `stopping` on the main thread, which may be inside a write of the
    same log: with a plain lock the server hung and never exited."""
    import threading

    log = None

    class Interrupting(io.StringIO):
        hit = False

        def write(self, s):
            if not Interrupting.hit:  # as a handler would, between two steps of this write
                Interrupting.hit = True
                log.info("stopping", "stopping on signal 15")
            return super().write(s)

    buf = Interrupting()
    log = Log("runner serve", "text", "info", stream=buf)
    t = threading.Thread(target=lambda: log.info("request", "GET / 200"), daemon=True)
    t.start()
    t.join(30)  # (a bound on a hang, not a timing assertion)
    assert not t.is_alive(), "the log deadlocked"
    assert buf.getvalue().splitlines() == ["runner serve: stopping on signal 15", "runner serve: GET / 200"]
