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

BACKENDS = {
    "local": "executors.local:LocalExecutor",
    "docker": "executors.docker:DockerExecutor",
    "ssh": "executors.ssh:SSHExecutor",
    "swarm": "executors.swarm:SwarmExecutor",
}


def get_executor(name: str, **config) -> "Executor":
    """Build a backend by name; its module is imported only now (keeps start-up fast)."""
    import importlib

    try:
        target = BACKENDS[name]
    except KeyError:
        raise InvalidConfig(f"unknown executor {name!r}: choose one of {', '.join(BACKENDS)}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(**config)


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
    "get_executor", "parse_size",
]
