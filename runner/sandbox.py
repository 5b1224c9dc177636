"""A Sandbox: one in-sandbox agent process, reached over its stdin/stdout (JSON lines).

The executor decides where the process runs (a container, a subprocess, an SSH host); the
protocol is the same everywhere. A call writes one request line and reads lines until its
result: `output` events are streamed to a callback, so a flood never piles up in memory.
"""
from __future__ import annotations

import collections
import json
import time
from typing import Callable

from executors import ExecRequest, Executor, ExecutorError

from . import bundle

START_TIMEOUT = 60.0


class SandboxDied(Exception):
    """The agent (or its container) ended or stopped answering; the sandbox must be replaced."""


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
        self._buf = bytearray()
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=32)
        self.dead: str | None = None
        self.used = False
        self.started_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> "Sandbox":
        t0 = time.monotonic()
        self.executor.start()
        self.proc = self.executor.spawn(ExecRequest(argv=bundle.argv(self.python), cwd=self.cwd, env=self.env))
        try:
            self.proc.write(bundle.payload())
            self._send(self.hello_msg)
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
                    self._send_on(proc, {"op": "shutdown"})
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
        return self.proc is not None and self.dead is None

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
                return msg
            # anything else (a stale event, a log line) is ignored

    def _send(self, msg: dict) -> None:
        try:
            self._send_on(self.proc, msg)
        except (OSError, ExecutorError) as e:
            self._die(f"could not write to the agent: {e}")

    @staticmethod
    def _send_on(proc, msg: dict) -> None:
        proc.write(json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n")

    def _next(self, deadline: float) -> dict:
        """The next JSON message from the agent's stdout."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                if not line.strip():
                    continue
                try:
                    return json.loads(line)
                except ValueError:
                    self._stderr.append(b"(non-JSON on stdout) " + line[:200])
                    continue
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
                    why = "out of memory" if code == 137 and self.proc.oom_killed() else f"exit status {code}"
                except Exception as e:  # the engine lost it too
                    why = f"gone: {e}"
                self._die(f"the sandbox ended ({why})")
            elif stream == "stdout":
                self._buf += data
            else:
                self._stderr.append(data[-2000:])

    def _die(self, why: str, kill: bool = False) -> None:
        tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-600:]
        self.dead = why + (f"; its last words: {tail}" if tail else "")
        if kill and self.proc is not None:
            self.proc.kill()
        raise SandboxDied(self.dead)
