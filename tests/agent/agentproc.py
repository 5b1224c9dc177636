"""A test-side client of the in-sandbox agent: `python3 -m runner.agent` as a local subprocess."""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]


class AgentProc:
    def __init__(self, workspace, **hello) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "runner.agent"], cwd=str(REPO), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, bufsize=-1)
        self.lines: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=64)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.hello_reply = None
        self._n = 0
        if workspace is not None:
            msg = {"op": "hello", "workspace": str(workspace),
                   "protected": [str(Path(workspace) / ".git" / "hooks")], **hello}
            self.send(msg)
            self.hello_reply = self.next()

    def _read(self) -> None:
        try:
            for line in iter(self.proc.stdout.readline, b""):
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: dict) -> None:
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def next(self, timeout: float = 60) -> dict:
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise EOFError("the agent closed its stdout; stderr: " + self.stderr_text())
        return json.loads(line)

    def call(self, tool: str, args: dict, on_output: Optional[Callable[[str], None]] = None,
             timeout: float = 120) -> dict:
        """The result message; output events go to on_output (or are joined into msg['output'])."""
        self._n += 1
        cid = f"c{self._n}"
        self.send({"op": "call", "id": cid, "tool": tool, "args": args})
        chunks = []
        while True:
            msg = self.next(timeout)
            if msg.get("op") == "output":
                assert msg["id"] == cid
                assert len(msg["data"]) <= 64 * 1024
                (on_output or chunks.append)(msg["data"])
            elif msg.get("op") == "result":
                assert msg["id"] == cid
                if on_output is None:
                    msg["output"] = "".join(chunks)
                return msg
            else:
                raise AssertionError(f"unexpected message during a call: {msg}")

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def close(self, timeout: float = 10) -> int:
        try:
            self.send({"op": "shutdown"})
        except OSError:
            pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.stderr.close()


def compose(msg: dict) -> dict:
    """What the controller makes of a result: streamed output + "\\n" + suffix, or (no output)."""
    content = msg.get("content")
    meta = msg.get("meta") or {}
    if meta.get("streamed"):
        text = msg.get("output", "")
        suffix = content or ""
        if text and suffix:
            text = (text if text.endswith("\n") else text + "\n") + suffix
        content = text or suffix or "(no output)"
    return {"content": content, "is_error": bool(msg.get("is_error")), "meta": meta}
