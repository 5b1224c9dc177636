"""executors: where commands run. A reusable library; it knows nothing of tools or policies.

    from executors import ExecRequest, get_executor
    with get_executor("docker", image="runner/base") as ex:
        print(ex.run(["echo", "hi"]).stdout)
"""
from .base import Executor, Process
from .errors import (EngineUnavailable, ExecCancelled, ExecutorError, FileTooLarge, ImageNotFound, InvalidConfig,
                     SandboxGone)
from .models import DEFAULT_LIMITS, ExecRequest, ExecResult, Limits, StartFailure, parse_size

BACKENDS = {
    "local": "executors.local:LocalExecutor",
    "docker": "executors.docker:DockerExecutor",
    "ssh": "executors.ssh:SSHExecutor",
    "swarm": "executors.swarm:SwarmExecutor",
}


def get_executor(name: str, **config) -> Executor:
    """Build a backend by name; its module is imported only now (keeps start-up fast)."""
    import importlib

    try:
        target = BACKENDS[name]
    except KeyError:
        raise InvalidConfig(f"unknown executor {name!r}: choose one of {', '.join(BACKENDS)}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(**config)


__all__ = [
    "DEFAULT_LIMITS", "EngineUnavailable", "ExecCancelled", "ExecRequest", "ExecResult", "Executor", "ExecutorError",
    "FileTooLarge", "ImageNotFound", "InvalidConfig", "Limits", "Process", "SandboxGone", "StartFailure",
    "get_executor", "parse_size",
]
