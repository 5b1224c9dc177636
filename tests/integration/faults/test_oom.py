"""OOM in a per-session sandbox: 137 and "memory" in the result, and the next call in a fresh
sandbox (the memory limit may have killed any process in the old one)."""
from __future__ import annotations

import pytest

from runner import Runner

pytestmark = pytest.mark.docker

HOG = "python3 -c 'x = []\nwhile True: x.append(bytearray(2**20))'"


@pytest.mark.parametrize("tool", ["bash", "exec"])
def test_oom_is_137_and_memory_and_the_next_call_gets_a_fresh_sandbox(workspace, no_leaks, tool):
    with Runner(workspace=workspace, lifecycle="per-session", preset="all",
                overrides={"limits.memory": "128m"}) as r:
        before = r.call("bash", {"command": "hostname"}).text.strip()
        res = r.call(tool, {"command": HOG})
        assert res.is_error
        assert "137" in res.text and "memory" in res.text, res.text
        assert res.meta.get("oom_killed") is True, res.meta
        after = r.call("bash", {"command": "hostname"})
        assert not after.is_error, after.text
        assert after.text.strip() != before, "the next call ran in the sandbox the OOM hit"


def test_a_plain_kill_9_is_not_called_out_of_memory(workspace, no_leaks):
    with Runner(workspace=workspace, lifecycle="per-session", overrides={"limits.memory": "128m"}) as r:
        before = r.call("bash", {"command": "hostname"}).text.strip()
        res = r.call("bash", {"command": "kill -9 $$"})
        assert res.is_error and "137" in res.text and "memory" not in res.text, res.text
        assert r.call("bash", {"command": "hostname"}).text.strip() == before  # nothing to replace
