"""A dialect cannot bypass the policy: protected paths, deny lists, rate limits, redaction and
the audit hold for every dialect's calls exactly as for native ones."""
from __future__ import annotations

import json

import pytest

from runner import Runner
from runner.reporting.audit import AuditLog, format_record

pytestmark = pytest.mark.usefixtures("no_leaks")

# Each dialect's writing tools, aimed at the protected directory `guarded/` (its file: f.txt).
WRITES = {
    "ah": [("write", {"path": "guarded/new.txt", "content": "x"}),
           ("write", {"path": "/workspace/guarded/f.txt", "content": "x"}),
           ("edit", {"path": "guarded/f.txt", "old_string": "keep", "new_string": "lost"})],
    "acai": [("write", {"path": "guarded/new.txt", "content": "x"}),
             ("edit", {"path": "guarded/f.txt", "old_string": "keep", "new_string": "lost"}),
             ("apply_patch", {"patch": "*** Begin Patch\n*** Add File: guarded/new.txt\n+x\n*** End Patch\n"})],
    "forgekeeper": [("write_file", {"file": "guarded/new.txt", "content": "x"}),
                    ("write_file", {"file": "guarded/f.txt", "content": "x", "overwrite": True}),
                    ("write_file", {"file": "./other/../guarded/f.txt", "content": "x", "overwrite": True})],
    "go-agent": [("write", {"path": "guarded/new.txt", "content": "x"}),
                 ("edit", {"path": "guarded/f.txt", "old_text": "keep", "new_text": "lost"})],
    "miclaw": [("write", {"path": "guarded/new.txt", "content": "x"}),
               ("edit", {"path": "guarded/f.txt", "old_text": "keep", "new_text": "lost"}),
               ("apply_patch", {"patch": "*** Begin Patch\n*** Update File: guarded/f.txt\n@@\n-keep\n+lost\n"
                                         "*** End Patch\n"})],
}


@pytest.mark.parametrize("dialect", list(WRITES))
def test_protected_paths_are_refused_through_every_dialects_writes(tmp_path, dialect):
    ws = tmp_path / "ws"
    (ws / "guarded").mkdir(parents=True)
    (ws / "other").mkdir()
    (ws / "guarded" / "f.txt").write_text("keep\n")
    audit = tmp_path / "audit.jsonl"
    with Runner(executor="docker", workspace=ws, preset="all", dialect=dialect, protect=["guarded"],
                overrides={"audit.path": str(audit)}) as r:
        for tool, args in WRITES[dialect]:
            res = r.call(tool, args)
            assert res.is_error, (tool, args, res.content)
            assert "protected directory" in res.content, (tool, args, res.content)
            assert res.meta["error_type"] == "gated" and res.meta["dialect"] == dialect
    assert (ws / "guarded" / "f.txt").read_text() == "keep\n"
    assert sorted(p.name for p in (ws / "guarded").iterdir()) == ["f.txt"]
    recs = AuditLog(audit).tail(100)
    assert [(x["dialect"], x["dialect_tool"], x["status"], x["error_type"]) for x in recs] == [
        (dialect, tool, "error", "gated") for tool, _ in WRITES[dialect]]
    natives = {"write_file": "write"}
    assert [x["tool"] for x in recs] == [natives.get(tool, tool) for tool, _ in WRITES[dialect]]


def test_the_audit_names_dialect_tool_and_native_tool(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    audit = tmp_path / "audit.jsonl"
    with Runner(executor="docker", workspace=ws, preset="all", dialect="forgekeeper",
                overrides={"audit.path": str(audit)}) as r:
        assert not r.call("write_file", {"file": "a.txt", "content": "hello"}).is_error
        assert not r.call("read_file", {"file": "a.txt"}).is_error
        assert r.call("run_bash", {}).is_error  # refused by the dialect's schema: audited all the same
        assert r.call("run_powershell", {}).is_error  # not offered: audited too
    recs = AuditLog(audit).tail(10)
    assert [(x["dialect"], x["dialect_tool"], x["tool"], x["status"], x["error_type"]) for x in recs] == [
        ("forgekeeper", "write_file", "write", "ok", None), ("forgekeeper", "read_file", "read", "ok", None),
        ("forgekeeper", "run_bash", "bash", "error", "validation"),
        ("forgekeeper", "run_powershell", "run_powershell", "error", "validation")]
    assert "  forgekeeper:write_file->write  ok  " in format_record(recs[0])
    assert json.loads(recs[0]["args"]) == {"file": "a.txt", "content": "hello"}  # as the agent sent them
    assert recs[2]["error"] == "script is required"


def test_deny_holds_by_native_and_by_dialect_name(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with Runner(executor="docker", workspace=ws, preset="all", dialect="forgekeeper",
                overrides={"tools.deny": ["bash", "read_dir"]}) as r:
        names = [s.name for s in r.dialect.specs(r)]
        assert "run_bash" not in names and "read_dir" not in names and "read_file" in names
        res = r.call("run_bash", {"script": "echo hi"})
        assert res.is_error and res.meta["error_type"] == "gated"
        assert res.content.startswith("run_bash (runner's bash): tool bash is denied by the policy")
        assert "allowed here: echo, get_time, read_file" in res.content  # the dialect's names
    with Runner(executor="docker", workspace=ws, preset="all", dialect="forgekeeper",
                overrides={"tools.deny": ["run_bash"]}) as r:  # a policy written in the dialect's names
        assert "run_bash" not in [s.name for s in r.dialect.specs(r)]
        res = r.call("run_bash", {"script": "touch made-it"})
        assert res.is_error and res.meta["error_type"] == "gated" and "denied by the policy" in res.content
    assert not (ws / "made-it").exists()
    with Runner(executor="docker", workspace=ws, dialect="go-agent") as r:  # preset coding: no web tools
        res = r.call("web_fetch", {"url": "http://127.0.0.1/"})
        assert res.is_error and res.meta["error_type"] == "gated"
        assert res.content == ("tool web_fetch is not allowed by the policy default (preset coding); allowed here: "
                               "read, bash, edit, write, grep, ls, result")
        res = r.call("web_fetch", {"url": 1, "nested": [[[[]]]]})  # the gate speaks before the arguments
        assert res.meta["error_type"] == "gated"


def test_rate_limits_count_the_native_tool(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with Runner(executor="docker", workspace=ws, preset="all", dialect="go-agent",
                overrides={"rate_limits.tools.write": {"capacity": 1, "refill_per_second": 0.001}}) as r:
        assert not r.call("write", {"path": "a", "content": "1"}).is_error
        res = r.call("write", {"path": "b", "content": "2"})
        assert res.is_error and res.meta["error_type"] == "gated" and "rate" in res.content.lower()
    assert not (ws / "b").exists()


def test_secrets_are_redacted_inside_json_answers(tmp_path, monkeypatch):
    secret = 'sk-live"quoted\\and\nlong-0123456789'
    monkeypatch.setenv("DIALECT_TEST_TOKEN", secret)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "leak.txt").write_text(f"token={secret}\n")
    pol = tmp_path / "policy.yaml"
    pol.write_text("extends: default\ntools: {preset: all}\nenv: {allow: []}\n"
                   "secrets:\n  API_TOKEN: {from_env: DIALECT_TEST_TOKEN}\n")
    with Runner(executor="docker", workspace=ws, policy=str(pol), dialect="forgekeeper") as r:
        read = r.call("read_file", {"file": "leak.txt"})
        ran = r.call("run_bash", {"script": 'printf "%s" "$API_TOKEN"'})
    for res in (read, ran):
        assert not res.is_error, res.content
        assert "0123456789" not in res.content and "0123456789" not in json.dumps(res.meta)
        assert "[REDACTED" in res.content
    assert json.loads(read.content)["content"].startswith("token=[REDACTED")
