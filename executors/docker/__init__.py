"""Docker backend: hardened ephemeral containers through the Docker SDK (and, for `runner exec`
on the local engine, oneshot.py over wire.py: the same hardening with the standard library only)."""

# Imported when first named (PEP 562), so executors.docker.oneshot loads neither pydantic nor docker-py.
_LAZY = {"DockerExecutor": "executor", "Mount": "config", "SandboxConfig": "config"}
_ALIAS = {"EXECUTOR": "DockerExecutor"}  # what executors.get_executor("docker") builds


def __getattr__(name: str):
    if name in _ALIAS:
        value = globals()[name] = __getattr__(_ALIAS[name])
        return value
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DockerExecutor", "Mount", "SandboxConfig"]
