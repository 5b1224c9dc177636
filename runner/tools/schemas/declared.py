"""A tool's spec as a server declared it (RemoteRunner.tools): a ToolSpec, as Runner.tools gives,
whose JSON Schema is the one the server sent."""
from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from .registry import ToolSpec


@dataclass(frozen=True)
class DeclaredSpec(ToolSpec):
    declared: dict = field(default_factory=dict)

    def schema(self) -> dict:
        return dict(self.declared)


def of(d: dict) -> DeclaredSpec:
    """The spec of one entry of `runner tools --format json` (GET /v1/tools)."""
    return DeclaredSpec(name=str(d.get("name", "")), description=str(d.get("description", "")), model=BaseModel,
                        guidance=str(d.get("guidance") or ""), writes=bool(d.get("writes")),
                        network=bool(d.get("network")), needs_approval=bool(d.get("needs_approval")),
                        source=str(d.get("source") or "builtin"),
                        declared=d.get("parameters") if isinstance(d.get("parameters"), dict) else {})
