"""JSON-lines plugins (TOOLS.md, custom tools 4): long-lived processes the agent keeps.

    -> {"type":"describe"}
    <- {"name", "description", "parameters": JSON Schema}   (or {"tools": [several of those]})
    -> {"type":"call","call_id","name","params"}
    <- {"call_id", "content":[{"type":"text","text"}], "is_error"}

Calls to one plugin are serialised (a lock per plugin). A plugin that dies is started again on
the next call; one that does not answer within the timeout is killed (its process group).
"""
from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import threading
import time

from . import procs
from .context import Ctx, ToolError

LINE_MAX = 64 * 1024 * 1024
_plugins: "dict[tuple, Plugin]" = {}
_lock = threading.Lock()
_seq = [0]


class PluginGone(ToolError):
    """The plugin ended or was killed; the next call starts it again."""


class Plugin:
    def __init__(self, ctx: Ctx, path: str, args: list) -> None:
        self.argv = [path] + list(args)
        self.path = path
        self.lock = threading.Lock()
        self.err: collections.deque = collections.deque(maxlen=20)
        self.buf = bytearray()
        try:
            self.proc = subprocess.Popen(self.argv, cwd=ctx.workspace, env=ctx.env, start_new_session=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as e:
            raise ToolError(f"cannot start plugin {path}: {e.strerror or e}") from None
        self.err_reader = threading.Thread(target=self._stderr, daemon=True)
        self.err_reader.start()

    def _stderr(self) -> None:
        try:
            for line in iter(self.proc.stderr.readline, b""):
                self.err.append(line.decode("utf-8", "replace").rstrip()[:500])
        except (OSError, ValueError):
            pass

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        procs.kill_group(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.err_reader.join(0.5)
        for p in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                p.close()
            except OSError:
                pass

    def _last_words(self) -> str:
        self.err_reader.join(0.5)  # the final lines, now that the process is gone
        tail = "\n".join(self.err).strip()
        return f"; its stderr: {tail[-800:]}" if tail else ""

    def request(self, msg: dict, match, timeout: float) -> dict:
        """Send one line and read lines until `match(obj)`; kill the plugin on a timeout."""
        try:
            self.proc.stdin.write(json.dumps(msg).encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            self.kill()
            raise PluginGone(f"plugin {self.path} is not reading its input (exit code "
                             f"{self.proc.poll()}){self._last_words()}; it will be started again on the next call") from None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a log line on stdout: not ours
                if isinstance(obj, dict) and match(obj):
                    return obj
                continue
            if len(self.buf) > LINE_MAX:
                self.kill()
                raise PluginGone(f"plugin {self.path} wrote a line over {LINE_MAX} bytes; it was killed")
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise PluginGone(f"plugin {self.path} did not answer within {timeout:g}s: it was killed and "
                                 "will be started again on the next call")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                code = procs._wait(self.proc, 2)
                self.kill()
                raise PluginGone(f"plugin {self.path} exited (code {code}) before answering"
                                 f"{self._last_words()}; it will be started again on the next call")
            self.buf += data


def _get(ctx: Ctx, path: str, args: list) -> Plugin:
    key = (path, tuple(args))
    with _lock:
        p = _plugins.get(key)
        if p is None or not p.alive:
            if p is not None:
                p.kill()
            p = _plugins[key] = Plugin(ctx, path, args)
        return p


def _forget(path: str, args: list, p: Plugin) -> None:
    with _lock:
        if _plugins.get((path, tuple(args))) is p:
            del _plugins[(path, tuple(args))]


def describe(ctx: Ctx, path: str, args: list, timeout: float) -> list:
    p = _get(ctx, path, args)
    with p.lock:
        try:
            obj = p.request({"type": "describe"}, lambda o: "name" in o or "tools" in o, timeout)
        except PluginGone:
            _forget(path, args, p)
            raise
    found = obj["tools"] if isinstance(obj.get("tools"), list) else [obj]
    out = []
    for t in found:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise ToolError(f"plugin {path} described a tool without a name: {str(t)[:120]!r}")
        params = t.get("parameters") or t.get("input_schema") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ToolError(f"plugin {path}: parameters of {t['name']} must be a JSON Schema object")
        out.append({"name": t["name"], "description": str(t.get("description") or ""),
                    "guidance": str(t.get("guidance") or t.get("system_prompt") or ""), "parameters": params,
                    "needs_approval": bool(t.get("needsApproval") or t.get("needs_approval"))})
    return out


def call(ctx: Ctx, path: str, args: list, name: str, params: dict, timeout: float) -> dict:
    p = _get(ctx, path, args)
    with _lock:
        _seq[0] += 1
        call_id = f"r{os.getpid()}-{_seq[0]}"
    with p.lock:
        try:
            obj = p.request({"type": "call", "call_id": call_id, "name": name, "params": params},
                            lambda o: o.get("call_id") == call_id, timeout)
        except PluginGone as e:
            _forget(path, args, p)
            timed_out = "did not answer" in str(e)
            return {"content": str(e), "is_error": True, "meta": {"kind": "plugin", "timed_out": timed_out}}
    content = obj.get("content")
    if isinstance(content, list):
        text = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    else:
        text = "" if content is None else content if isinstance(content, str) else json.dumps(content)
    return {"content": text, "is_error": bool(obj.get("is_error")), "meta": {"kind": "plugin"}}


def shutdown() -> None:
    with _lock:
        for p in _plugins.values():
            p.kill()
        _plugins.clear()
