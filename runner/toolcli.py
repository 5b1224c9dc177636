"""`runner tools`, `runner call` and `runner session`: tool calls from the command line."""
from __future__ import annotations

import json
import sys
from typing import Any

from .errors import UsageError


def make_runner(workspace: str, executor: str | None, policy: str | None, protect: list[str]):
    from .core import Runner

    kw: dict[str, Any] = {}
    return Runner(executor=executor, workspace=workspace, policy=policy, protect=protect, **kw)


def parse_args_json(text: str) -> dict:
    try:
        args = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise UsageError(f"arguments are not valid JSON ({e.msg} at column {e.colno}): give an object like "
                         "'{\"path\": \"a.txt\"}'") from None
    if not isinstance(args, dict):
        raise UsageError(f"arguments must be a JSON object, not {type(args).__name__}")
    return args


def call(tool: str, args_text: str, workspace: str, executor: str | None, policy: str | None, protect: list[str]) -> int:
    args = parse_args_json(args_text)
    with make_runner(workspace, executor, policy, protect) as r:
        res = r.call(tool, args)
    sys.stdout.write(res.model_dump_json() + "\n")
    return 1 if res.is_error else 0


def session(workspace: str, executor: str | None, policy: str | None, protect: list[str]) -> int:
    """One JSON call per line in, one JSON result per line out, in order; one sandbox throughout."""
    from .results import ToolResult

    out = sys.stdout
    with make_runner(workspace, executor, policy, protect) as r:
        for n, line in enumerate(sys.stdin, 1):
            if not line.strip():
                continue
            call_id = None
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict) or not isinstance(msg.get("tool"), str):
                    raise ValueError('a call is an object {"id": ..., "tool": "NAME", "args": {...}}')
                call_id = msg.get("id")
                args = msg.get("args", {})
                if not isinstance(args, dict):
                    raise ValueError("args must be a JSON object")
                res = r.call(msg["tool"], args, call_id=str(call_id) if call_id is not None else None)
            except ValueError as e:
                res = ToolResult.error(f"line {n}: {e}", error_type="validation")
            answer = {"id": call_id, **json.loads(res.model_dump_json())}
            out.write(json.dumps(answer, ensure_ascii=False) + "\n")
            out.flush()
    return 0


def tools(preset: str | None, fmt: str, prompt: bool, workspace: str, executor: str | None, policy: str | None) -> str:
    from .core import Runner
    from .schemas import formats, registry

    if preset is not None:
        if preset not in registry.PRESETS:
            raise UsageError(f"unknown preset {preset!r}: choose one of {', '.join(registry.PRESETS)}")
        specs = [registry.get(n) for n in registry.preset(preset)]
    else:
        # Custom tools describe themselves in the policy's sandbox (never on the host unless the
        # executor is local), so the executor is the policy's unless given.
        r = Runner(executor=executor, workspace=workspace, policy=policy)
        try:
            specs = r.tools()
            for e in r.custom_errors():
                sys.stderr.write(f"runner: skipped custom tool {e.get('path')} ({e.get('place')}): {e.get('error')}\n")
        finally:
            r.close()
    if prompt:
        return formats.prompt(specs)
    if fmt not in formats.FORMATS:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(formats.FORMATS)}")
    return formats.export(specs, fmt)
