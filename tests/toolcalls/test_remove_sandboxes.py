"""A session's sandboxes removed under a running call (what `runner mcp` does when a client goes
away mid-call): the call ends now with a clear error instead of at its timeout, and nothing of
the session is left, on every backend that has sandboxes."""
from __future__ import annotations

import threading

import pytest

TIMEOUT = 300  # the call's own timeout: far longer than the test waits for it


@pytest.fixture
def sandboxed(executor):
    if executor == "local":
        pytest.skip("the local backend has no sandbox to remove")
    return executor


def test_removing_the_sessions_sandboxes_ends_the_call_in_flight(sandboxed, runner, workspace):
    out: dict = {}
    marker = workspace / "started"

    def go():
        out["result"] = runner.call("bash", {"command": f"touch {marker.name}; exec sleep 600", "timeout": TIMEOUT})

    t = threading.Thread(target=go)
    t.start()
    while not marker.exists():
        assert t.is_alive(), out
        t.join(0.05)
    runner.session.placement.remove_sandboxes()
    t.join(TIMEOUT)
    assert not t.is_alive(), "the call ran on to its timeout"
    res = out["result"]
    assert res.is_error and "the sandbox died during this call" in res.text, res.text
