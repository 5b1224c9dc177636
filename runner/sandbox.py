"""A Sandbox: one in-sandbox agent process, reached over its stdin/stdout (JSON lines).

The executor decides where the process runs (a container, a subprocess, an SSH host); the
protocol is the same everywhere. A call writes one request line and reads lines until its
result: `output` events are streamed to a callback, so a flood never piles up in memory.
The hello carries a fresh key; every later line either way is authenticated and bounded
(toolbox/wire.py): a line the agent did not write, or one too long, ends the sandbox.
"""
from __future__ import annotations

import collections
import json
import os
import time
from typing import Callable

from executors import ExecRequest, Executor, ExecutorError
from executors.models import OOM_EXIT

from . import bundle
from .errors import RunnerError
from .toolbox import wire

START_TIMEOUT = 60.0
MAX_LINE = wire.MAX_LINE


class SandboxDied(RunnerError):
    """The agent (or its container) ended or stopped answering; the sandbox must be replaced."""


class NoSandbox(RunnerError):
    """No sandbox could be started for an op: the message says why."""


class Sandbox:
    def __init__(self, executor: Executor, hello: dict, *, python: str = "python3", cwd: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.executor = executor
        self.hello_msg = {"op": "hello", **hello}
        self.python = python
        self.cwd = cwd
        self.env = env or {}
        self.proc = None
        self.info: dict = {}
        self._key = os.urandom(32)
        self._tx = wire.Signer(wire.direction_key(self._key, wire.TO_AGENT))
        self._rx = wire.Verifier(wire.direction_key(self._key, wire.FROM_AGENT))
        self._lines = wire.LineBuffer(MAX_LINE)
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=32)
        self.dead: str | None = None
        self.retired: str | None = None  # why this sandbox serves no further call (it still answered this one)
        self.used = False
        self.started_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> "Sandbox":
        t0 = time.monotonic()
        try:  # any failure from here closes what was made (a container may exist, unstarted)
            self.executor.start()
            # own_init: the agent is pid 1 of a fresh container and reaps orphans itself, so no
            # docker-init (dumpable, holding the same stdio) sits in front of the channel.
            self.proc = self.executor.spawn(ExecRequest(argv=bundle.argv(self.python), cwd=self.cwd, env=self.env,
                                                        own_init=True))
            self.proc.write(bundle.payload())
            hello = json.dumps({**self.hello_msg, "key": self._key.hex()}, ensure_ascii=False).encode("utf-8")
            self.proc.write(hello + b"\n")
            reply = self._next(time.monotonic() + timeout)
        except BaseException:
            self.close()
            raise
        if reply.get("op") != "hello" or not reply.get("ok"):
            self.close()
            raise SandboxDied(f"the agent did not start: {reply}")
        self.info = reply
        self.started_at = time.monotonic() - t0
        return self

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if not self.dead:
                    proc.write(self._tx.frame({"op": "shutdown"}))
                proc.close_stdin()
                if proc.wait(timeout=2) is None:
                    proc.kill()
            except Exception:
                proc.kill()
            finally:
                proc.close()
        try:
            self.executor.stop()
        except Exception:
            pass

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.dead is None and self.retired is None and not self.proc.ended()

    # -- calls --------------------------------------------------------------------------
    def call(self, call_id: str, tool: str, args: dict, timeout: float,
             on_output: Callable[[str], None] | None = None) -> dict:
        """Send one call and return its raw result message. Raises SandboxDied."""
        if not self.alive:
            raise SandboxDied(self.dead or "the sandbox is closed")
        self.used = True
        self._send({"op": "call", "id": call_id, "tool": tool, "args": args})
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline)
            op = msg.get("op")
            if op == "output" and msg.get("id") == call_id:
                if on_output is not None:
                    on_output(msg.get("data", ""))
            elif op == "result" and msg.get("id") == call_id:
                if isinstance(msg.get("meta"), dict) and msg["meta"].get("oom_killed"):
                    # The memory limit may have killed any process in it (a background job, a
                    # server the agent started): what is left is not the sandbox the caller had.
                    self.retired = "an out-of-memory kill"
                    msg["content"] = f"{msg.get('content') or ''}; a fresh sandbox will serve the next call"
                return msg
            # anything else (a stale event, a log line) is ignored

    def _send(self, msg: dict) -> None:
        try:
            self.proc.write(self._tx.frame(msg))
        except (OSError, ExecutorError) as e:
            self._die(f"could not write to the agent: {e}")

    def _next(self, deadline: float) -> dict:
        """The next message from the agent's stdout. A line that is not the agent's next
        authentic line, or longer than MAX_LINE, means something in the sandbox wrote to the
        channel: the sandbox is declared dead (SandboxDied) and nothing of it is trusted."""
        while True:
            try:
                line = self._lines.pop()
                if line is not None:
                    return self._rx.open(line)
            except wire.WireError as e:
                self._die(f"the agent's output channel was tampered with ({e}); a process in the sandbox "
                          "wrote to it, so nothing more from this sandbox is trusted", kill=True, words=False)
            left = deadline - time.monotonic()
            if left <= 0:
                self._die("the agent did not answer in time", kill=True)
            item = self.proc.read(timeout=min(left, 1.0))
            if item is None:
                continue
            stream, data = item
            if stream == "eof":
                try:
                    code = self.proc.wait(timeout=2)
                    why = f"exit status {code}" + (", out of memory" if code == OOM_EXIT and self.proc.oom_killed() else "")
                except Exception as e:  # the engine lost it too
                    why = f"gone: {e}"
                self._die(f"the sandbox ended ({why})")
            elif stream == "stdout":
                self._lines.feed(data)
            else:
                self._stderr.append(data[-2000:])

    def _die(self, why: str, kill: bool = False, words: bool = True) -> None:
        """Raise SandboxDied. words: quote the tail of the agent's stderr (which the processes in
        the sandbox can write too: left out when they are known to have tampered)."""
        tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-600:] if words else ""
        self.dead = why + (f"; its last words: {tail}" if tail else "")
        if kill and self.proc is not None:
            self.proc.kill()
        raise SandboxDied(self.dead)
