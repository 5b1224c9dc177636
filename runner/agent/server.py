"""The agent's JSON-lines loop on stdin/stdout.

    -> {"op": "hello", "workspace": "/workspace", "protected": [...], "roots": [...],
        "max_write_bytes": N, "network": {"mode": "none"|"allowlist", "allow": [...]},
        "search_endpoint": null, "env": {...}}
    <- {"op": "hello", "ok": true, "pid": N, "python": "3.11.2", "tools": [...]}
    -> {"op": "call", "id": "c1", "tool": "read", "args": {...}}
    <- {"op": "output", "id": "c1", "data": "..."}            (bash, exec: zero or more)
    <- {"op": "result", "id": "c1", "content": ..., "is_error": false, "meta": {...}}
    -> {"op": "ping"}            <- {"op": "pong"}
    -> {"op": "shutdown"} or EOF: background jobs are killed and the agent exits 0.

Anything the agent cannot act on is answered `{"op": "error", "error": "..."}` (or an error
result when the line names a call id); the loop survives every input. Only protocol lines go
to stdout: file descriptor 1 is pointed at stderr, so nothing else can leak there.
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import signal
import sys
from typing import Any, BinaryIO, Dict, Optional

from .context import ConfigError, Context
from .result import Result, ToolError

# tool name -> (module, function): imported on first use so the agent starts fast
TOOLS: Dict[str, tuple] = {
    "read": ("files", "read"), "write": ("files", "write"), "edit": ("files", "edit"),
    "apply_patch": ("patch", "apply_patch"),
    "ls": ("listing", "ls"), "read_dir": ("listing", "read_dir"), "glob": ("listing", "glob"),
    "find": ("listing", "find"), "grep": ("grep", "grep"),
    "bash": ("procs", "bash"), "exec": ("procs", "exec_"), "process": ("procs", "process"),
    "http_fetch": ("net", "http_fetch"), "web_fetch": ("net", "web_fetch"), "web_search": ("net", "web_search"),
    "git_status": ("git", "git_status"), "git_diff": ("git", "git_diff"), "git_log": ("git", "git_log"),
    "git_add": ("git", "git_add"), "git_commit": ("git", "git_commit"), "git_push": ("git", "git_push"),
    "git_pull": ("git", "git_pull"),
    "echo": ("small", "echo"), "get_time": ("small", "get_time"),
    "memory_search": ("small", "memory_search"), "memory_get": ("small", "memory_get"),
}


def run_tool(ctx: Context, tool: str, args: Any) -> Result:
    """One call, never raising: a failure of any kind is an error result."""
    if tool not in TOOLS:
        return Result(f"unknown tool: {tool}. Tools this agent runs: {', '.join(sorted(TOOLS))}", True,
                      {"error_type": "validation"})
    if not isinstance(args, dict):
        return Result(f"args of {tool} must be a JSON object, got {type(args).__name__}", True,
                      {"error_type": "validation"})
    module, name = TOOLS[tool]
    try:
        fn = getattr(importlib.import_module("." + module, __package__), name)
        res = fn(ctx, args)
        return res if isinstance(res, Result) else Result(str(res))
    except ToolError as e:
        return Result(str(e), True, dict(e.meta))
    except Exception as e:  # a bug or an unforeseen value: report it, keep serving
        return Result(f"internal error in {tool}: {type(e).__name__}: {e}", True, {"error_type": "internal"})


class Server:
    def __init__(self, inp: BinaryIO, out: BinaryIO) -> None:
        self.inp = inp
        self.out = out
        self.ctx: Optional[Context] = None

    def send(self, msg: Dict[str, Any]) -> None:
        line = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), default=str)
        self.out.write(line.encode("utf-8", "replace") + b"\n")
        self.out.flush()

    def serve(self) -> None:
        n = 0
        while True:
            line = self.inp.readline()
            if not line:
                return
            n += 1
            if not line.strip():
                continue
            try:
                msg = json.loads(line.decode("utf-8", "replace"))
            except ValueError as e:
                self.send({"op": "error", "error": f"line {n} is not JSON ({e}); send one JSON object per line"})
                continue
            if not isinstance(msg, dict):
                self.send({"op": "error", "error": f"line {n} is not a JSON object"})
                continue
            op = msg.get("op")
            if op == "shutdown":
                return
            if op == "hello":
                self.hello(msg)
            elif op == "call":
                self.call(msg)
            elif op == "ping":
                self.send({"op": "pong", "id": msg.get("id")})
            else:
                self.send({"op": "error", "id": msg.get("id"),
                           "error": f"unknown op {op!r}: use hello, call, ping or shutdown"})

    def hello(self, msg: Dict[str, Any]) -> None:
        try:
            ctx = Context.from_hello(msg)
        except (ConfigError, TypeError, ValueError) as e:
            self.send({"op": "hello", "ok": False, "error": str(e)})
            return
        if self.ctx is not None:
            ctx.jobs = self.ctx.jobs
        self.ctx = ctx
        self.send({"op": "hello", "ok": True, "pid": os.getpid(), "python": platform.python_version(),
                   "tools": list(TOOLS)})

    def call(self, msg: Dict[str, Any]) -> None:
        call_id = msg.get("id")
        tool = msg.get("tool")
        if self.ctx is None:
            res = Result("the agent has no configuration yet: the controller must send hello first", True,
                         {"error_type": "internal"})
        elif not isinstance(tool, str):
            res = Result('a call names its tool: {"op": "call", "id": ..., "tool": "NAME", "args": {...}}', True,
                         {"error_type": "validation"})
        else:
            self.ctx.emit = lambda data: self.send({"op": "output", "id": call_id, "data": data})
            try:
                res = run_tool(self.ctx, tool, msg.get("args", {}))
            finally:
                self.ctx.emit = lambda data: None
        self.send(res.to_msg(call_id))

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.jobs.kill_all()


def _on_term(signum, frame):
    raise SystemExit(0)


def main() -> None:
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray write to fd 1 (ours or a child's) lands on stderr, never in the protocol
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _on_term)
    server = Server(inp, out)
    try:
        server.serve()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        server.close()
    sys.exit(0)
