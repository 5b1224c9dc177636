"""runner: run AI agents' tools inside ephemeral, hardened sandboxes.

    from runner import Runner
    with Runner(executor="docker", workspace=".") as r:
        print(r.call("read", {"path": "README.md"}).content)

Imports are lazy so `runner --help` stays instant.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Runner", "ToolResult"]


def __getattr__(name: str):
    if name == "Runner":
        from .core import Runner

        return Runner
    if name == "ToolResult":
        from .results import ToolResult

        return ToolResult
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
