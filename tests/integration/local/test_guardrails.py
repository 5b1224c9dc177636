"""The Runner's guardrails in order, with a real policy: gates, rate limits, approval,
protected paths, redaction and the audit log (local executor: these are controller-side)."""
from __future__ import annotations

import json
import os


from runner import Runner
from runner.reporting.audit import AuditLog
from runner.policy import load


def make(tmp_path, **overrides):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    pol = load("default").effective(overrides={"sandbox.executor": "local", **overrides})
    return Runner(workspace=ws, policy=pol), ws


def test_rate_limit_refuses_with_when_to_retry(tmp_path):
    r, _ = make(tmp_path, **{"rate_limits.tools": {"ls": {"capacity": 2, "refill_per_second": 0.01}}})
    with r:
        assert not r.call("ls", {}).is_error and not r.call("ls", {}).is_error
        res = r.call("ls", {})
        assert res.is_error and "rate limit: ls allows" in res.text and "retry in" in res.text
        assert res.meta["error_type"] == "gated" and res.meta["retry_after"] > 0
        assert not r.call("read", {"path": "nope"}).text.startswith("rate limit")


def test_feature_gates_and_deny(tmp_path):
    r, _ = make(tmp_path, **{"features.bash": False, "tools.deny": ["grep"]})
    with r:
        assert "features.bash: false" in r.call("bash", {"command": "true"}).text
        assert "tools.deny" in r.call("grep", {"pattern": "x"}).text
        assert {s.name for s in r.tools()} == {"read", "write", "edit", "apply_patch", "ls", "glob", "result"}


def test_protected_paths_on_the_local_executor_follow_symlinks(tmp_path):
    r, ws = make(tmp_path, protect=["secrets"])
    (ws / "secrets").mkdir()
    os.symlink(ws / "secrets", ws / "innocent")
    with r:
        for path in ("secrets/a", "innocent/a", ".git/hooks/pre-commit", str(ws / "secrets" / "b")):
            res = r.call("write", {"path": path, "content": "x"})
            assert res.is_error and "path is in a protected directory" in res.text, path


def test_audit_log_has_one_redacted_line_per_call(tmp_path, monkeypatch):
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("RUNNER_AUDIT_LOG", str(log))
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-value-123456")
    r, _ = make(tmp_path, secrets={"DEPLOY_TOKEN": {"from_env": "DEPLOY_TOKEN"}}, tenant="acme")
    with r:
        res = r.call("bash", {"command": "echo token is $DEPLOY_TOKEN; echo ghp_" + "a" * 36})
        r.call("read", {"path": "missing.txt"})
        r.call("read", {"bogus": 1})
    assert "s3cr3t-value-123456" not in res.text and "[REDACTED" in res.text and "ghp_aaaa" not in res.text
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["tool"], x["status"], x["error_type"]) for x in recs] == [
        ("bash", "ok", None), ("read", "error", "execution"), ("read", "error", "validation")]
    assert all(x["tenant"] == "acme" and x["session"] == r.session_id for x in recs)
    assert "s3cr3t" not in log.read_text()
    assert AuditLog(log).show(recs[0]["call_id"])[0]["output_bytes"] > 0


def test_policy_mounts_reach_the_sandbox_read_only(tmp_path, no_leaks):
    data = tmp_path / "data"
    data.mkdir()
    (data / "ref.txt").write_text("reference\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    pol = load("default").effective(overrides={"mounts": [{"source": str(data), "target": "/data", "mode": "ro"}]})
    with Runner(executor="docker", workspace=ws, policy=pol) as r:
        assert r.call("read", {"path": "/data/ref.txt"}).text.endswith("reference")
        assert "Read-only file system" in r.call("bash", {"command": "touch /data/x"}).text
        assert "protected directory" in r.call("write", {"path": "/data/y", "content": "1"}).text


def test_approval_never_reads_stdin(tmp_path, monkeypatch):
    """`ask` must not take its answer from stdin, where `runner session` reads call lines."""
    import dataclasses
    import io

    from runner.controller import core
    from runner.tools.schemas import registry

    monkeypatch.setitem(registry.SPECS, "echo", dataclasses.replace(registry.SPECS["echo"], needs_approval=True))
    stdin = io.StringIO("y\n")
    monkeypatch.setattr("sys.stdin", stdin)
    r, _ = make(tmp_path, approval="ask", **{"tools.allow": ["echo"]})
    with r:
        monkeypatch.setattr(core, "open_tty", lambda: (_ for _ in ()).throw(OSError("no tty")))
        res = r.call("echo", {"text": "hi"})
        assert res.is_error and "no terminal" in res.text and res.meta["error_type"] == "gated"
        assert stdin.read() == "y\n"  # untouched
        asked = []
        monkeypatch.setattr(core, "open_tty", lambda: FakeTty("y\n", asked))
        assert r.call("echo", {"text": "hi"}).text == "hi"
        assert "echo needs approval" in asked[0]
        monkeypatch.setattr(core, "open_tty", lambda: FakeTty("n\n", asked))
        assert "not approved" in r.call("echo", {"text": "hi"}).text


class FakeTty:
    """A terminal: what is written goes to the person, what is read comes from them."""

    def __init__(self, answer, asked):
        self.answer, self.asked = answer, asked

    def write(self, text):
        self.asked.append(text)

    def flush(self):
        pass

    def readline(self):
        return self.answer

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_arguments_over_the_size_limit_are_refused_and_the_next_call_works(tmp_path):
    r, ws = make(tmp_path)
    with r:
        res = r.call("write", {"path": "huge.txt", "content": "x" * (33 * 1024 * 1024)})
        assert res.is_error and "over runner's limit" in res.text and res.meta["error_type"] == "validation"
        assert not (ws / "huge.txt").exists()
        assert not r.call("write", {"path": "small.txt", "content": "ok"}).is_error
