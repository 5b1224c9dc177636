"""Controller side of the tools: argument models, the registry and presets, export formats.

    from runner.tools import validate_args, get, preset
    from runner.tools import formats

Submodules load on first use, so importing `runner.tools` costs nothing until a name is used.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ToolSpec": "registry", "ToolArgError": "registry", "validate_args": "registry", "get": "registry",
    "exists": "registry", "all_specs": "registry", "names": "registry", "preset": "registry",
    "PRESETS": "registry", "register": "registry", "written_paths": "registry", "export": "formats",
    "FORMATS": "formats",
}
__all__ = sorted(_EXPORTS) + ["args", "registry", "formats"]


def __getattr__(name: str) -> Any:
    if name in ("args", "registry", "formats"):
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'runner.tools' has no attribute {name!r}")
