"""`runner audit tail`'s filters and -f (AuditLog.tail's match, AuditLog.follow) on real files."""
from __future__ import annotations

import threading

from runner.reporting.audit import AuditLog, matcher


def rec(log: AuditLog, i: int, tenant: str = "a", tool: str = "bash", session: str = "s1") -> None:
    log.record(call_id=f"c{i}", tool=tool, status="ok", session=session, tenant=tenant)


def test_tail_filters_by_tenant_session_and_tool(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    rec(log, 1, "a", "bash", "s1")
    rec(log, 2, "b", "bash", "s2")
    rec(log, 3, "a", "read", "s1")
    rec(log, 4, "a", "bash", "s3")
    ids = lambda recs: [r["call_id"] for r in recs]  # noqa: E731
    assert ids(log.tail(10, matcher(tenant="a"))) == ["c1", "c3", "c4"]
    assert ids(log.tail(2, matcher(tenant="a"))) == ["c3", "c4"]
    assert ids(log.tail(10, matcher(tool="bash", tenant="a"))) == ["c1", "c4"]
    assert ids(log.tail(10, matcher(session="s2"))) == ["c2"]
    assert log.tail(10, matcher(tenant="zz")) == []
    assert matcher() is None


def test_follow_gives_the_last_records_then_each_new_one_across_rotations(tmp_path):
    """A burst rotates the log several times between two looks: the files rotated after the one
    followed are read too (while the log keeps them)."""
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=600, keep=10)  # a few records a file: rotations
    for i in range(1, 4):
        rec(log, i)
    got, done = [], threading.Event()
    match = matcher(tenant="a")

    def follow():
        for r in AuditLog(tmp_path / "audit.jsonl").follow(2, match, poll=0.02, stop=done.is_set):
            got.append(r["call_id"])
    t = threading.Thread(target=follow, daemon=True)
    t.start()
    try:
        _until(lambda: got == ["c2", "c3"])
        for i in range(4, 20):
            rec(log, i, tenant="a" if i % 2 else "b")
        assert len(log.files()) > 1  # it rotated while followed
        _until(lambda: got[-1] == "c19")
    finally:
        done.set()
        t.join(10)
    assert got == ["c2", "c3"] + [f"c{i}" for i in range(5, 20, 2)]  # each of a's once, in order, no b's


def test_follow_goes_on_in_the_new_log_after_each_rotation(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", max_bytes=450, keep=1)
    rec(log, 0)
    got, done = [], threading.Event()
    t = threading.Thread(target=lambda: got.extend(r["call_id"] for r in AuditLog(tmp_path / "audit.jsonl").follow(
        1, poll=0.02, stop=done.is_set)), daemon=True)
    t.start()
    try:
        _until(lambda: got == ["c0"])  # it follows
        for i in range(1, 12):
            rec(log, i)
            _until(lambda i=i: len(got) == i + 1, what=(got, i))  # each record seen before the next rotation
    finally:
        done.set()
        t.join(10)
    assert got == [f"c{i}" for i in range(0, 12)]
    assert len(log.files()) == 2


def test_follow_waits_for_a_log_that_does_not_exist_yet(tmp_path):
    path = tmp_path / "sub" / "audit.jsonl"
    got, done = [], threading.Event()
    t = threading.Thread(target=lambda: got.extend(r["call_id"] for r in AuditLog(path).follow(
        5, poll=0.02, stop=lambda: done.is_set() or len(got) >= 1)), daemon=True)
    t.start()
    try:
        rec(AuditLog(path), 1)
        _until(lambda: got == ["c1"])
    finally:
        done.set()
        t.join(10)


def _until(cond, timeout: float = 20.0, what=None) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"not within the time: {what}"
        time.sleep(0.02)
