"""Tool specs exported for agents' APIs, and as one prompt block."""
from __future__ import annotations

import json

FORMATS = ("table", "json", "openai", "anthropic", "mcp")


def _one(spec, fmt: str) -> dict:
    schema = spec.schema()
    if fmt == "openai":
        return {"type": "function", "function": {"name": spec.name, "description": spec.description, "parameters": schema}}
    if fmt == "anthropic":
        return {"name": spec.name, "description": spec.description, "input_schema": schema}
    if fmt == "mcp":  # MCP has no field for guidance: it follows the description
        text = f"{spec.description}\n\n{spec.guidance}" if spec.guidance else spec.description
        return {"name": spec.name, "description": text, "inputSchema": schema}
    return {"name": spec.name, "description": spec.description, "guidance": spec.guidance, "parameters": schema,
            "source": spec.source, "writes": spec.writes, "network": spec.network, "needs_approval": spec.needs_approval}


def export(specs, fmt: str) -> str:
    if fmt == "table":
        width = max((len(s.name) for s in specs), default=4)
        rows = [f"{'TOOL':{width}}  {'SOURCE':8}  DESCRIPTION"]
        rows += [f"{s.name:{width}}  {s.source:8}  {s.description}" for s in specs]
        return "\n".join(rows)
    return json.dumps([_one(s, fmt) for s in specs], indent=2, ensure_ascii=False)


def prompt(specs) -> str:
    """Every tool's description and usage guidance as one block for a system prompt."""
    parts = ["# Tools", ""]
    for s in specs:
        parts.append(f"## {s.name}\n{s.description}" + (f"\n{s.guidance}" if s.guidance else ""))
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"
