"""executors: where commands run. A reusable library; it knows nothing of tools or policies.

    from executors import ExecRequest, get_executor
    with get_executor("docker", image="runner/base") as ex:
        print(ex.run(["echo", "hi"]).stdout)
"""
from typing import TYPE_CHECKING

from .errors import (EngineUnavailable, ExecCancelled, ExecutorError, FileTooLarge, ImageNotFound, InvalidConfig,
                     SandboxGone)

# Imported when first named (PEP 562): the models need pydantic, which a path that must start
# fast (`runner exec`, importing only executors.errors and executors.docker.oneshot) never loads.
if TYPE_CHECKING:
    from .base import Executor

_LAZY = {"Executor": "base", "Process": "base", "DEFAULT_LIMITS": "models", "ExecRequest": "models",
         "ExecResult": "models", "Limits": "models", "StartFailure": "models", "parse_size": "defaults"}

def get_executor(name: str, **config) -> "Executor":
    """Build a backend by name: the executor class `executors.NAME` names as its EXECUTOR, its module
    imported only now (keeps start-up fast). No table here: the one registry of backends is runner's
    (runner/backends), which also says how the controller places a sandbox on each; this is the
    library's shorthand for the executors shipped in this package. Raises InvalidConfig for a name
    that is none of them."""
    import importlib

    module = None
    if name.isidentifier():
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    cls = getattr(module, "EXECUTOR", None)
    if cls is None:
        raise InvalidConfig(f"unknown executor {name!r}: choose one of {', '.join(shipped())}") from None
    return cls(**config)


def shipped() -> tuple[str, ...]:
    """The names of the executors in this package: its modules that name an EXECUTOR (each is
    imported: for an error message, not a fast path)."""
    import importlib
    import pkgutil

    out = []
    for info in pkgutil.iter_modules(__path__):
        try:
            if getattr(importlib.import_module(f"{__name__}.{info.name}"), "EXECUTOR", None) is not None:
                out.append(info.name)
        except ImportError:  # an optional dependency missing: not offered
            continue
    return tuple(out)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LIMITS", "EngineUnavailable", "ExecCancelled", "ExecRequest", "ExecResult", "Executor", "ExecutorError",
    "FileTooLarge", "ImageNotFound", "InvalidConfig", "Limits", "Process", "SandboxGone", "StartFailure",
    "get_executor", "parse_size", "shipped",
]
