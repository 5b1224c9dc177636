"""The backends runner places sandboxes on, each described once: a config class and a module.

    from runner import backends
    backends.names()                                    # ('local', 'docker', 'ssh')
    cfg = backends.parse({"type": "ssh", "ssh": {...}})  # the discriminated union, checked by pydantic
    placement = cfg.placement(setting)                  # base.Placement: where things are

Adding a backend is one module here, runner/backends/NAME.py, holding its config class (a
BackendConfig subclass with a `type: Literal["NAME"]` and a `placement()` that returns its
Placement) and naming it `CONFIG`; the package's listing is the registry (a plugin's backend,
elsewhere, calls register()). This is the one registry of backends: executors.get_executor is the
library's shorthand for the executors of that package and holds no table. The policy's
`sandbox.executor` accepts exactly the registered names; modules are imported only when a config
is made.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Annotated, Any, Union

if TYPE_CHECKING:
    from .base import BackendConfig, Placement, Setting, ToolFolder

# the modules of this package that are no backend (docker_engine: the docker backend's
# standard-library half, for `runner exec` and `runner images`)
_NOT_BACKENDS = ("base", "conformance", "docker_engine")
_BASE = ("BackendConfig", "Placement", "Setting", "ToolFolder")


def __getattr__(name: str) -> Any:
    """base.py's names, imported on first use (it is pydantic): `runner exec` imports this package
    for docker_engine, and never loads pydantic."""
    if name in _BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _listed() -> dict[str, str]:
    """The backends of this package: each module but base and conformance, by its CONFIG. Listed
    with os.listdir (pkgutil imports importlib.util and more: `runner exec` imports this package)."""
    import os

    names = set()
    for d in __path__:
        for entry in os.listdir(d):
            if entry.endswith(".py"):
                names.add(entry[:-3])
            elif entry.isidentifier() and os.path.isfile(os.path.join(d, entry, "__init__.py")):
                names.add(entry)
    return {n: f"{__name__}.{n}:CONFIG" for n in sorted(names)
            if n.isidentifier() and not n.startswith("_") and n not in _NOT_BACKENDS}


BACKENDS: dict[str, str] = _listed()


def register(name: str, target: str) -> None:
    """Add a backend: `target` is 'module:ConfigClass' (imported when first used)."""
    BACKENDS[name] = target


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def config_class(name: str) -> type[BackendConfig]:
    try:
        module, _, cls = BACKENDS[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: choose one of {' | '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)


def union() -> Any:
    """The discriminated union of the registered config classes (on `type`)."""
    from pydantic import Field

    classes = tuple(config_class(n) for n in BACKENDS)
    return Annotated[Union[classes], Field(discriminator="type")] if len(classes) > 1 else classes[0]


def parse(data: Any) -> BackendConfig:
    """A backend config from a dict ({"type": NAME, ...}) or a config; pydantic says what is wrong."""
    from .base import BackendConfig

    if isinstance(data, BackendConfig):
        return data
    from pydantic import TypeAdapter

    return TypeAdapter(union()).validate_python(data)


def for_policy(name: str, given: Any = None, **settings: Any) -> BackendConfig:
    """The config of the backend a policy names (`sandbox.executor`), from what the caller gave:
    a config of that backend or its dict, and the Runner's backend keywords (ssh=, egress_network=)."""
    from .base import BackendConfig

    cls = config_class(name)
    if isinstance(given, BackendConfig) and not isinstance(given, cls):
        raise ValueError(f"a {given.type} backend config was given, but the policy's sandbox.executor is {name}")
    return cls.from_given(given, **settings)


__all__ = ["BACKENDS", "BackendConfig", "Placement", "Setting", "ToolFolder", "config_class", "for_policy", "names",
           "parse", "register", "union"]
