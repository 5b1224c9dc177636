"""The audit log under SIGKILL while it is being written: each line is whole or absent."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from runner.reporting.audit import AuditLog

WRITER = textwrap.dedent("""
    import os, sys
    from runner.reporting.audit import AuditLog
    log = AuditLog(sys.argv[1])
    i = 0
    while True:
        i += 1
        log.record(call_id=f"c{i}", tool="bash", session="s", status="error", error_type="execution",
                   args={"command": "x" * (i % 3000)}, error="e" * (i % 4000))
""")

# Killed in the middle of writing its line: the first os.write of the record puts half of it in
# the file, then the process is SIGKILLed (what a kill between two writes of a line leaves).
TORN = textwrap.dedent("""
    import os, signal, sys
    from runner.reporting.audit import AuditLog
    log = AuditLog(sys.argv[1])
    log.record(call_id="whole", tool="read", session="s", status="ok")
    real = os.write
    def half_then_die(fd, data):
        real(fd, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    os.write = half_then_die
    log.record(call_id="torn", tool="read", session="s", status="ok", args={"path": "y" * 150})
""")


def _lines(path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), f"the log ends in a torn line: {raw[-120:]!r}"
    return [json.loads(line) for line in raw.split(b"\n")[:-1]]  # every line parses, or this fails


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_a_line_cut_by_sigkill_is_gone_before_the_next_line(tmp_path):
    path = tmp_path / "audit.jsonl"
    p = subprocess.run([sys.executable, "-c", TORN, str(path)], env=_env())
    assert p.returncode == -signal.SIGKILL
    assert not path.read_bytes().endswith(b"\n")  # the kill did leave half a line
    AuditLog(path).record(call_id="after", tool="read", session="s", status="ok")
    assert [r["call_id"] for r in _lines(path)] == ["whole", "after"]
    assert [r["call_id"] for r in AuditLog(path).tail(5)] == ["whole", "after"]


def test_a_writer_that_wrote_last_still_cuts_a_line_torn_by_another_since(tmp_path):
    """A writer skips reading the log's last byte when the log is as it left it: a torn line of
    another process since then changed its size, so it is cut, not built on."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record(call_id="first", tool="read", session="s", status="ok")
    p = subprocess.run([sys.executable, "-c", TORN, str(path)], env=_env())
    assert p.returncode == -signal.SIGKILL
    assert not path.read_bytes().endswith(b"\n")
    log.record(call_id="after", tool="read", session="s", status="ok")
    assert [r["call_id"] for r in _lines(path)] == ["first", "whole", "after"]


def test_writer_sigkilled_while_writing_leaves_only_whole_lines(tmp_path):
    path = tmp_path / "audit.jsonl"
    for _ in range(3):  # three writers, each killed at whatever point it has reached
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=_env())
        start = path.stat().st_size if path.exists() else 0
        while (path.stat().st_size if path.exists() else 0) < start + 200_000:
            assert p.poll() is None, "the writer died by itself"
            os.sched_yield()
        p.send_signal(signal.SIGKILL)
        assert p.wait() == -signal.SIGKILL
        AuditLog(path).record(call_id="after", tool="read", session="s", status="ok")
        recs = _lines(path)
        assert recs[-1]["call_id"] == "after"
        assert len(recs) > 10


def test_disk_error_mid_line_leaves_no_part_of_it(tmp_path, monkeypatch):
    """A write that fails half-way (ENOSPC) takes its half line back before the error goes on."""
    import errno

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.record(call_id="whole", tool="read", session="s", status="ok")
    real = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError) as err:
        log.record(call_id="lost", tool="read", session="s", status="ok")
    monkeypatch.setattr(os, "write", real)
    assert err.value.errno == errno.ENOSPC and len(calls) == 2
    assert [r["call_id"] for r in _lines(path)] == ["whole"]
