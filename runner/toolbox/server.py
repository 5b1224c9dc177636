"""The agent's loop: JSON lines in on stdin, JSON lines out on stdout, one call at a time."""
from __future__ import annotations

import json
import os
import platform
import sys
import threading
import traceback

from . import custom, files, gitops, listing, net, patch, plugins, procs, small
from .context import Ctx, ToolError

TOOLS = {
    "read": files.read, "write": files.write, "edit": files.edit, "apply_patch": patch.apply_patch,
    "ls": listing.ls, "read_dir": listing.read_dir, "glob": listing.glob, "find": listing.find, "grep": listing.grep,
    "bash": procs.bash, "exec": procs.exec_, "process": procs.process,
    "http_fetch": net.http_fetch, "web_fetch": net.http_fetch, "web_search": net.web_search,
    "git_status": gitops.git_status, "git_diff": gitops.git_diff, "git_log": gitops.git_log, "git_add": gitops.git_add,
    "git_commit": gitops.git_commit, "git_push": gitops.git_push, "git_pull": gitops.git_pull,
    "echo": small.echo, "get_time": small.get_time, "memory_search": small.memory_search, "memory_get": small.memory_get,
    "custom_describe": custom.describe, "custom_run": custom.run,  # custom tools: the controller's ops
}
STREAMING = {"bash", "exec"}


class Wire:
    """The protocol's stdout. fd 1 is pointed at stderr, so nothing else can write here."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.lock = threading.Lock()

    def send(self, msg: dict) -> None:
        line = json.dumps(msg, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
        with self.lock:
            self.out.write(line)


def answer(call_id, value) -> dict:
    if isinstance(value, dict) and "content" in value:
        return {"op": "result", "id": call_id, "content": value["content"], "is_error": bool(value.get("is_error")),
                "meta": value.get("meta") or {}}
    return {"op": "result", "id": call_id, "content": value, "is_error": False, "meta": {}}


def handle_call(ctx: Ctx, msg: dict) -> dict:
    call_id, tool, args = msg.get("id"), msg.get("tool"), msg.get("args")
    fn = TOOLS.get(tool)
    if fn is None:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"unknown tool: {tool}. Tools here: {', '.join(sorted(TOOLS))}"}
    if not isinstance(args, dict):
        return {"op": "result", "id": call_id, "is_error": True, "meta": {}, "content": "args must be a JSON object"}
    try:
        value = fn(ctx, args, call_id) if tool in STREAMING else fn(ctx, args)
        return answer(call_id, value)
    except ToolError as e:
        return {"op": "result", "id": call_id, "content": str(e), "is_error": True, "meta": {}}
    except KeyError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"missing argument {e.args[0]} for {tool}"}
    except PermissionError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"{tool}: permission denied: {e.filename or e}"}
    except OSError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"{tool}: {e.strerror or e}{': ' + str(e.filename) if e.filename else ''}"}
    except Exception as e:  # a bug in a tool must not end the agent
        traceback.print_exc()
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"internal error in {tool}: {type(e).__name__}: {e}"}


def main() -> None:
    wire = Wire()
    inp = sys.stdin.buffer
    ctx = None
    try:
        while True:
            line = inp.readline()
            if not line:
                break
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                wire.send({"op": "error", "error": f"bad request line: {e}"})
                continue
            op = msg.get("op")
            if op == "hello":
                ctx = Ctx(msg)
                ctx.send = wire.send
                try:
                    os.chdir(ctx.workspace)
                except OSError:
                    pass
                wire.send({"op": "hello", "ok": True, "pid": os.getpid(), "python": platform.python_version(),
                           "tools": sorted(TOOLS)})
            elif op == "call":
                if ctx is None:
                    wire.send({"op": "result", "id": msg.get("id"), "is_error": True, "meta": {},
                               "content": "the agent got a call before hello"})
                    continue
                wire.send(handle_call(ctx, msg))
            elif op == "shutdown":
                break
            else:
                wire.send({"op": "error", "error": f"unknown op {op!r}"})
    finally:
        procs.shutdown()
        plugins.shutdown()
