"""Tool specs exported for agents' APIs, and as one prompt block. Custom tools' names,
descriptions and guidance come from the workspace: control characters are escaped in every
format (runner/untrusted/printable.py), so what is printed neither forges lines nor drives a terminal."""
from __future__ import annotations

from ...untrusted.printable import json_text, printable

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
        rows += [f"{printable(s.name):{width}}  {printable(s.source):8}  {printable(s.description)}" for s in specs]
        return "\n".join(rows)
    return json_text([_one(s, fmt) for s in specs], indent=2)


def prompt(specs) -> str:
    """Every tool's description and usage guidance as one block for a system prompt."""
    parts = ["# Tools", ""]
    for s in specs:
        parts.append(f"## {printable(s.name)}\n{printable(s.description, newlines=True)}"
                     + (f"\n{printable(s.guidance, newlines=True)}" if s.guidance else ""))
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"
