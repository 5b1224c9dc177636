"""A session's sandboxes removed under a running call (what `runner mcp` does when a client goes
away mid-call): the call ends now with a clear error instead of at its timeout, and nothing of
the session is left, on every backend that has sandboxes."""
from __future__ import annotations

import pytest

from ..faults.midcall import break_mid_call


@pytest.fixture
def sandboxed(executor):
    if executor == "local":
        pytest.skip("the local backend has no sandbox to remove")
    return executor


def test_removing_the_sessions_sandboxes_ends_the_call_in_flight(sandboxed, runner, workspace):
    res = break_mid_call(runner, workspace, runner.session.placement.remove_sandboxes)
    assert res.is_error and "the sandbox died during this call" in res.text, res.text
