"""Tool specs exported for the systems that consume them.

    export(specs, "json" | "openai" | "anthropic" | "mcp" | "table") -> str
    prompt(specs) -> str      # a tools section for a system prompt, with each tool's guidance
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable

FORMATS = ("table", "json", "openai", "anthropic", "mcp")


def as_json(spec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "guidance": spec.guidance,
            "parameters": spec.schema(), "writes": spec.writes, "network": spec.network,
            "needs_approval": spec.needs_approval, "where": spec.where, "source": spec.source}


def as_openai(spec) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": spec.schema()}}


def as_anthropic(spec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.schema()}


def as_mcp(spec) -> dict[str, Any]:
    out = {"name": spec.name, "description": spec.description, "inputSchema": spec.schema()}
    hints = {"readOnlyHint": not spec.writes, "openWorldHint": spec.network}
    if spec.writes:
        hints["destructiveHint"] = spec.name in ("write", "apply_patch", "git_push")
    out["annotations"] = hints
    return out


_ONE: dict[str, Callable[[Any], dict]] = {"json": as_json, "openai": as_openai, "anthropic": as_anthropic,
                                          "mcp": as_mcp}


def table(specs: Iterable) -> str:
    specs = list(specs)
    if not specs:
        return "(no tools)"
    rows = []
    for s in specs:
        props = s.schema().get("properties", {})
        required = set(s.schema().get("required", []))
        params = ", ".join(p if p in required else p + "?" for p in props)
        flags = ",".join(f for f, on in (("writes", s.writes), ("network", s.network),
                                         ("approval", s.needs_approval)) if on)
        rows.append((s.name, params, flags, s.source, s.description))
    widths = [max(len(r[i]) for r in rows + [("TOOL", "ARGS", "FLAGS", "SOURCE", "")]) for i in range(4)]
    widths[1] = min(widths[1], 48)
    head = ("TOOL", "ARGS", "FLAGS", "SOURCE", "DESCRIPTION")
    lines = []
    for r in [head] + rows:
        args = r[1] if len(r[1]) <= widths[1] else r[1][: widths[1] - 1] + "…"
        lines.append(f"{r[0]:<{widths[0]}}  {args:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}")
    return "\n".join(line.rstrip() for line in lines)


def export(specs: Iterable, fmt: str) -> str:
    if fmt == "table":
        return table(specs)
    if fmt not in _ONE:
        raise ValueError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return json.dumps([_ONE[fmt](s) for s in specs], indent=2, ensure_ascii=False)


def prompt(specs: Iterable) -> str:
    """`Tools: a, b`, a `name: description` line each, then a `## name` section of guidance."""
    specs = list(specs)
    lines = ["Tools: " + ", ".join(s.name for s in specs), ""]
    lines += [f"{s.name}: {s.description}" for s in specs]
    for s in specs:
        if s.guidance:
            lines += ["", f"## {s.name}", s.guidance]
    return "\n".join(lines)
