"""`runner tools`, `runner call` and `runner session`: tool calls from the command line."""
from __future__ import annotations

import sys
from typing import Any

from ..errors import ErrorType, UsageError
from ..controller.guards import ARGS_MAX_BYTES

MAX_LINE_BYTES = ARGS_MAX_BYTES + 64 * 1024  # a session line: the largest arguments and the call around them


def require_engine(r) -> None:
    """EngineUnavailable (one line, exit 69) now rather than as each call's tool error."""
    r.session.placement.require_engine(r.lifecycle)


def parse_args_json(text: str) -> dict:
    from ..untrusted.boundedjson import loads

    try:
        args = loads(text) if text.strip() else {}
    except ValueError as e:
        raise UsageError(f"arguments are {e}: give an object like '{{\"path\": \"a.txt\"}}'") from None
    if not isinstance(args, dict):
        raise UsageError(f"arguments must be a JSON object, not {type(args).__name__}")
    return args


def call(tool: str, args_text: str, workspace: str, executor: str | None, policy: str | None, protect: list[str],
         dialect: str | None = None) -> int:
    from ..controller.core import make_runner, warn
    from ..untrusted.printable import json_text

    args = parse_args_json(args_text)
    with make_runner(workspace, executor, policy, protect, dialect, warned=False, one_call=True) as r:
        require_engine(r)
        warn(r.warnings())
        res = r.call(tool, args)
    sys.stdout.write(json_text(res.model_dump(mode="json")) + "\n")
    return 1 if res.is_error else 0


def call_remote(tool: str, args_text: str, server: str, key: str | None, policy: str | None,
                session: str | None = None) -> int:
    """`runner call --server URL --key KEY [--session ID]`: the same call on runner serve, in the
    open session ID (which stays open), or in a session of its own."""
    from ..client import RemoteRunner
    from ..untrusted.printable import json_text

    if not key:
        raise UsageError("--server needs the tenant's key: --key KEY or $RUNNER_KEY")
    if session is not None and policy is not None:
        raise UsageError("--policy: a session's policy was chosen when it was opened, not with --session")
    args = parse_args_json(args_text)
    r = RemoteRunner(server, key, policy, session=session)
    try:
        res = r.call(tool, args)
    finally:
        if session is None:
            r.close()
        else:
            r.detach()
    sys.stdout.write(json_text(res.model_dump(mode="json")) + "\n")
    return 1 if res.is_error else 0


ID_MAX_CHARS = 256


def _call_of(n: int, line: bytes | None) -> tuple[Any, str, dict]:
    """(id, tool, args) of one session line, or ValueError saying what is wrong with it."""
    from ..untrusted.boundedjson import loads

    if line is None:
        raise ValueError(f"longer than {MAX_LINE_BYTES} bytes, so it was dropped: send big data in parts "
                         "(write, then edit to append)")
    msg = loads(line)
    if not isinstance(msg, dict) or not isinstance(msg.get("tool"), str):
        raise ValueError('a call is an object {"id": ..., "tool": "NAME", "args": {...}}')
    call_id = msg.get("id")
    if (not (call_id is None or isinstance(call_id, (int, str))) or isinstance(call_id, bool)
            or len(str(call_id)) > ID_MAX_CHARS):  # JSON's true is a Python int
        raise ValueError(f"id must be a string or an integer of at most {ID_MAX_CHARS} characters")
    args = msg.get("args", {})
    if not isinstance(args, dict):
        raise ValueError("args must be a JSON object")
    return call_id, msg["tool"], args


def session(workspace: str, executor: str | None, policy: str | None, protect: list[str],
            dialect: str | None = None, snapshot: str | None = None) -> int:
    """One JSON call per line in, one JSON result per line out, in order; one sandbox throughout.
    A line that is not a call (invalid, nested too deeply, too long) gets an error result; the
    session goes on."""
    from ..controller.core import make_runner, warn
    from ..results import ToolResult
    from ..untrusted.boundedjson import lines
    from ..untrusted.printable import json_text

    out = sys.stdout
    with make_runner(workspace, executor, policy, protect, dialect, warned=False, snapshot=snapshot) as r:
        require_engine(r)
        warn(r.warnings())
        for n, line in lines(sys.stdin.buffer, MAX_LINE_BYTES):
            if line is not None and not line.strip():
                continue
            call_id = None
            try:
                call_id, tool, args = _call_of(n, line)
            except ValueError as e:
                res = ToolResult.error(f"line {n}: {e}", error_type=ErrorType.VALIDATION)
            else:
                res = r.call(tool, args, call_id=str(call_id) if call_id is not None else None)
            out.write(json_text({"id": call_id, **res.model_dump(mode="json")}) + "\n")
            out.flush()
    return 0


def tools(preset: str | None, fmt: str, prompt: bool, workspace: str, executor: str | None, policy: str | None,
          dialect: str | None = None) -> str:
    from ..controller.core import Runner
    from ..tools.dialects import tools_of
    from ..untrusted.printable import printable
    from ..tools.schemas import formats, registry

    notes: list[str] = []
    if preset is not None and preset not in registry.PRESETS:
        raise UsageError(f"unknown preset {preset!r}: choose one of {', '.join(registry.PRESETS)}")
    if preset is not None and dialect is None:
        specs = [registry.get(n) for n in registry.preset(preset)]
    else:
        # Custom tools describe themselves in the policy's sandbox (never on the host unless the
        # executor is local), so the executor is the policy's unless given.
        r = Runner(executor=executor, workspace=workspace, policy=policy, preset=preset, dialect=dialect)
        try:
            specs = tools_of(r)
            notes = r.dialect.listing_notes() if r.dialect is not None else []
            for e in r.custom_errors():
                sys.stderr.write(printable(f"runner: skipped custom tool {e.get('path')} ({e.get('place')}): "
                                           f"{e.get('error')}") + "\n")
        finally:
            r.close()
    if fmt not in formats.FORMATS:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(formats.FORMATS)}")
    if notes and (prompt or fmt != "table"):  # the schemas stay clean JSON: what is not offered goes to stderr
        for line in notes:
            sys.stderr.write(f"runner: {r.dialect.name} dialect: {line}\n")
    if prompt:
        return formats.prompt(specs)
    out = formats.export(specs, fmt)
    if notes and fmt == "table":
        out += "\n\n" + "\n".join(f"{r.dialect.name} dialect: {line}" for line in notes)
    return out
