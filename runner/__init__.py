"""runner: run AI agents' tools inside ephemeral, hardened sandboxes.

    from runner import Runner
    with Runner(executor="docker", workspace=".") as r:
        print(r.call("read", {"path": "README.md"}).content)

Runner, RemoteRunner (a `runner serve`), AsyncRunner and AsyncRemoteRunner share one interface
(runner/controller/interface.py).

Imports are lazy so `runner --help` stays instant.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["AsyncRemoteRunner", "AsyncRunner", "AsyncToolRunner", "ErrorType", "RemoteRunner", "Runner", "RunnerError",
           "ToolResult", "ToolRunner"]

# the documented names, each imported when first used (PEP 562)
_LAZY = {"Runner": "controller.core", "ToolResult": "results", "RemoteRunner": "client", "RunnerError": "errors",
         "ErrorType": "errors", "AsyncRunner": "controller.aio", "AsyncRemoteRunner": "controller.aio",
         "ToolRunner": "controller.interface", "AsyncToolRunner": "controller.interface"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
