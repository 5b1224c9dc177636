"""The controller's side of a sandbox (runner/controller/sandbox.py), with a stand-in process."""
from __future__ import annotations

import queue
import threading

import pytest

from runner.agent import wire
from runner.controller.sandbox import Sandbox, SandboxDied


class EngineHoldsTheKill:
    """A sandbox's process whose kill, like the engine's kill of a gVisor container, returns only
    once the output already on its way has been read (here: 4 chunks, then EOF)."""

    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()
        for _ in range(4):
            self.q.put(("stdout", b"A" * 64))
        self.unblocked = False

    def read(self, timeout=None):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def kill(self) -> None:
        deadline = threading.Event()
        for _ in range(300):  # a bound for the old code, which read nothing: 30 s, then give up
            if self.q.empty():
                self.unblocked = True
                break
            deadline.wait(0.1)
        self.q.put(("eof", b""))


def test_a_tampered_channel_is_drained_while_its_sandbox_is_killed():
    """A line too long ends the sandbox (killed). Nothing read its output any more, so a kill the
    engine holds until the output is read waited for minutes (the runsc flood of
    tests/integration/security/test_channel.py: ~240 s)."""
    sb = Sandbox(None, {})
    sb.proc = proc = EngineHoldsTheKill()
    sb._lines = wire.LineBuffer(16)
    sb._lines.feed(b"B" * 32)  # no newline, past the bound
    with pytest.raises(SandboxDied, match="tampered"):
        sb._open_next()
    assert proc.unblocked, "the kill waited for output nobody read"
