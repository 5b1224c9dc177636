"""The audit log: one redacted JSON line per call, size rotation, thread safety, readers."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runner.reporting.audit import AuditLog, default_path, format_record
from runner.policy import load_text
from runner.reporting.redact import Redactor
from runner.results import ToolResult

FIELDS = {"ts", "call_id", "session", "tenant", "tool", "args", "status", "error_type", "duration_ms", "output_bytes"}


def lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def test_one_line_per_call_with_every_field(tmp_path):
    log = AuditLog(tmp_path / "a" / "audit.jsonl")
    rec = log.record(call_id="c1", tool="bash", session="s1", tenant="acme", args={"command": "ls -la"},
                     status="ok", duration_ms=12.345, output_bytes=120, ts=0)
    (got,) = lines(log.path)
    assert got == rec and set(got) == FIELDS
    assert got["ts"] == "1970-01-01T00:00:00.000Z" and got["args"] == '{"command":"ls -la"}'
    assert got["error_type"] is None and got["duration_ms"] == 12.3
    assert (log.path.stat().st_mode & 0o777) == 0o600


def test_args_are_redacted_before_cut(tmp_path):
    secret = "very-secret-db-password"
    log = AuditLog(tmp_path / "audit.jsonl", redactor=Redactor({"DB": secret}))
    pad = "x" * 170
    rec = log.record(call_id="c", tool="bash", status="ok", args={"command": f"{pad} {secret} ghp_{'a' * 36}"})
    assert secret not in log.path.read_text() and "ghp_" not in log.path.read_text()
    assert len(rec["args"]) <= 200
    # the secret straddles the cut at 200 characters: no half of it may show
    assert "very-secret" not in rec["args"]
    assert rec["args"].startswith('{"command":"' + pad[:20]) and rec["args"].endswith("…")


def test_megabyte_arguments_stay_small_and_fast(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    rec = log.record(call_id="c", tool="write", status="ok", args={"path": "a", "content": "A" * 5_000_000,
                                                                  "many": list(range(100_000))})
    assert len(rec["args"]) <= 200 and log.path.stat().st_size < 1000


def test_error_records(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    rec = log.record(call_id="c", tool="write", status="error", error_type="gated",
                     error="path is in a protected directory: .git/hooks/x")
    assert rec["error_type"] == "gated" and rec["error"].startswith("path is in a protected")
    with pytest.raises(ValueError):
        log.record(call_id="c", tool="t", status="error", error_type="boom")
    with pytest.raises(ValueError):
        log.record(call_id="c", tool="t", status="maybe")
    assert log.record(call_id="c", tool="t", status="ok", error_type="timeout")["error_type"] is None


def test_record_result(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    ok = log.record_result(call_id="c1", tool="read", args={"path": "a"}, result=ToolResult(content="héllo"),
                           session="s", duration_ms=3)
    assert ok["status"] == "ok" and ok["output_bytes"] == 6
    err = log.record_result(call_id="c2", tool="bash", args={}, result=ToolResult.error("timed out after 5s",
                                                                                           error_type="timeout",
                                                                                           duration_ms=5000.0))
    assert (err["status"], err["error_type"], err["duration_ms"]) == ("error", "timeout", 5000.0)
    other = log.record_result(call_id="c3", tool="bash", args={}, result=ToolResult.error("exit code: 1"))
    assert other["error_type"] == "execution"


def test_rotation_keeps_n_files(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=1000, keep=2)
    for i in range(100):
        log.record(call_id=f"c{i}", tool="read", status="ok", args={"i": i})
    files = log.files()
    assert [f.name for f in files] == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert not (tmp_path / "audit.jsonl.3").exists()
    assert all(f.stat().st_size <= 1000 for f in files)
    ids = [r["call_id"] for f in reversed(files) for r in lines(f)]
    assert ids == [f"c{i}" for i in range(100 - len(ids), 100)]  # newest kept, in order


def test_rotation_keep_zero(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=500, keep=0)
    for i in range(50):
        log.record(call_id=f"c{i}", tool="t", status="ok")
    assert [f.name for f in log.files()] == ["audit.jsonl"] and log.tail(1)[0]["call_id"] == "c49"


def test_threads_never_tear_lines(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=20_000, keep=50)

    def worker(n):
        for i in range(200):
            log.record(call_id=f"t{n}-{i}", tool="bash", status="ok", args={"command": "x" * (i % 50)})

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    recs = [r for f in log.files() for r in lines(f)]  # json.loads of every line: none torn
    assert len(recs) == 1600 and len({r["call_id"] for r in recs}) == 1600


def test_tail_across_rotated_files(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=800, keep=10)
    for i in range(40):
        log.record(call_id=f"c{i}", tool="t", status="ok")
    assert [r["call_id"] for r in log.tail(25)] == [f"c{i}" for i in range(15, 40)]
    assert log.tail(0) == [] and len(log.tail(1000)) == 40


def test_show_finds_every_record_of_a_call_id(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=600, keep=10)
    log.record(call_id="c1", tool="read", session="s1", status="ok")
    for i in range(20):
        log.record(call_id=f"x{i}", tool="t", status="ok")
    log.record(call_id="c1", tool="bash", session="s2", status="error", error_type="timeout")
    got = log.show("c1")
    assert [(r["session"], r["tool"]) for r in got] == [("s1", "read"), ("s2", "bash")]
    assert log.show("nope") == []


def test_torn_line_is_skipped(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.record(call_id="a", tool="t", status="ok")
    with open(log.path, "a") as f:
        f.write('{"call_id": "torn"')
    log.record(call_id="b", tool="t", status="ok")
    assert [r["call_id"] for r in log.tail(10)] == ["a", "b"]


def test_default_path(monkeypatch, tmp_path):
    assert default_path({"RUNNER_AUDIT_LOG": str(tmp_path / "x.jsonl")}) == tmp_path / "x.jsonl"
    assert default_path({"XDG_STATE_HOME": "/st"}) == Path("/st/runner/audit.jsonl")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path({}) == tmp_path / ".local" / "state" / "runner" / "audit.jsonl"


def test_from_policy(tmp_path):
    p = load_text(f"audit: {{path: {tmp_path / 'p.jsonl'}, max_bytes: 1k, keep: 3}}\n")
    log = AuditLog.from_policy(p.audit)
    assert (log.path, log.max_bytes, log.keep) == (tmp_path / "p.jsonl", 1024, 3)
    assert AuditLog.from_policy(load_text("audit: {enabled: false}\n").audit) is None


def test_format_record(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    rec = log.record(call_id="c1", tool="bash", session="s", tenant="t", status="error", error_type="gated", ts=0)
    assert format_record(rec) == "1970-01-01T00:00:00.000Z  t/s/c1  bash  error:gated  0.0ms  0B  {}"


def test_a_log_rotated_by_another_writer_is_followed(tmp_path):
    """Each AuditLog keeps its file open between records: once another writer of the same path
    (another process, here another instance) rotated it, the next line goes to the new file,
    not after the old one's end under its new name."""
    a = AuditLog(tmp_path / "audit.jsonl", max_bytes=600, keep=20)
    b = AuditLog(tmp_path / "audit.jsonl", max_bytes=600, keep=20)
    b.record(call_id="b0", tool="t", status="ok")
    for i in range(19):  # 187 bytes a record: b's line fits the current file, so b must find it
        a.record(call_id=f"a{i}", tool="t", status="ok")
    b.record(call_id="b1", tool="t", status="ok")
    assert [r["call_id"] for r in lines(tmp_path / "audit.jsonl")][-1] == "b1"
    assert all(f.stat().st_size <= 600 for f in a.files())
    ids = [r["call_id"] for f in reversed(a.files()) for r in lines(f)]
    assert ids == ["b0"] + [f"a{i}" for i in range(19)] + ["b1"]
    a.close()
    b.close()


def test_a_removed_log_directory_is_made_again(tmp_path):
    import shutil

    log = AuditLog(tmp_path / "logs" / "audit.jsonl")
    log.record(call_id="c1", tool="t", status="ok")
    shutil.rmtree(tmp_path / "logs")
    log.record(call_id="c2", tool="t", status="ok")
    assert [r["call_id"] for r in lines(tmp_path / "logs" / "audit.jsonl")] == ["c2"]
    assert (tmp_path / "logs" / "audit.jsonl.lock").exists()  # the lock other writers take, not a removed one
    log.close()


def test_two_processes_rotating_one_log_lose_and_tear_nothing(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from runner.reporting.audit import AuditLog\n"
            "log = AuditLog(sys.argv[1], max_bytes=5000, keep=500)\n"
            "for i in range(400): log.record(call_id=f'{sys.argv[2]}{i}', tool='t', status='ok', args={'i': i})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "audit.jsonl"), who]) for who in "pq"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    log = AuditLog(tmp_path / "audit.jsonl", keep=500)
    recs = [r for f in log.files() for r in lines(f)]  # json.loads of every line: none torn
    assert sorted(r["call_id"] for r in recs) == sorted(f"{w}{i}" for w in "pq" for i in range(400))
    assert all(f.stat().st_size <= 5000 for f in log.files())


def test_a_writer_that_finds_the_log_rotated_by_another_still_keeps_it_under_its_size(tmp_path):
    """The race the two-process test above lost under load, made in order: writer A's log is
    rotated by writer B, which then fills the new log almost to max_bytes; A's next line must go
    to a rotated log too, not past max_bytes in the new one. (Two logs of one process take the
    same flock as two processes do: a flock belongs to its open file.)"""
    path = tmp_path / "audit.jsonl"
    a, b = AuditLog(path, max_bytes=1000, keep=50), AuditLog(path, max_bytes=1000, keep=50)
    a.record(call_id="a000", tool="t", status="ok")
    i = 0
    while not path.with_name("audit.jsonl.1").exists():  # B writes until it rotates A's log away
        b.record(call_id=f"b{i:04d}", tool="t", status="ok")
        i += 1
    line = path.stat().st_size  # the new log holds B's one line
    while path.stat().st_size + line <= 1000:  # and then until no line of that size fits
        b.record(call_id=f"b{i:04d}", tool="t", status="ok")
        i += 1
    a.record(call_id="a001", tool="t", status="ok")
    sizes = {f.name: f.stat().st_size for f in a.files()}
    assert all(s <= 1000 for s in sizes.values()), sizes
    assert sorted(r["call_id"] for f in a.files() for r in lines(f)) == sorted(["a000", "a001"] + [f"b{n:04d}" for n in range(i)])
    a.close()
    b.close()
