"""Dialects: the tool sets of other agent systems (the seeds in ../shared/seeds), presented over
runner's own tools, so an agent written for one of them runs unchanged.

    dialect: forgekeeper            # in a policy, or --dialect on call, session, tools and mcp

A dialect is a table per tool (runner/tools/dialects/base.py): its name, its argument model (names,
defaults, bounds as the seed documents them), how each argument becomes a native one (renamed,
units converted) and how the native answer is shaped back (a seed's JSON object, its error and
truncation texts). The call itself is a native call: Runner.call translates, runs the native tool
through the whole guard pipeline (gate, validation, rate limit, approval, protected paths, quota),
then shapes; redaction and the audit see the answer as the agent gets it, and the audit names the
dialect, the tool as called and the native tool that ran. What a seed documents and runner has no
body for is listed as not offered (`runner tools --dialect NAME`), never faked.

A dialect registers itself: a module of this package (go_agent.py is the dialect `go-agent`)
whose DIALECT carries that name. names() lists the package's modules without importing them (the
CLI's help and the policy's check stay cheap); get() imports one when it is first used. A dialect
from elsewhere is added with register(name, "module:ATTRIBUTE"). Nothing else names dialects: the
policy checks `dialect:` against names(), the CLI's help and the tests take them from here.
"""
from __future__ import annotations

import importlib

_NOT_DIALECTS = {"base"}  # the package's modules that are not a dialect
_registered: dict[str, str] = {}  # name -> "module:ATTRIBUTE", added by register()


def register(name: str, target: str) -> None:
    """Add a dialect from outside this package: target is 'module:ATTRIBUTE' (a Dialect named name),
    imported when first used."""
    _registered[name] = target


def names() -> tuple[str, ...]:
    """Every dialect's name: this package's modules (a listing, nothing imported) and the registered."""
    import os  # not pkgutil: it imports inspect, ast and typing, a tenth of a second of `runner --help`

    here = [f[:-3].replace("_", "-") for f in os.listdir(__path__[0])
            if f.endswith(".py") and not f.startswith("_") and f[:-3] not in _NOT_DIALECTS]
    return tuple(sorted(here)) + tuple(n for n in _registered if n not in here)


def get(name: str | None):
    """The Dialect of that name; None for none. UsageError for a name not among names()."""
    if name is None:
        return None
    if name not in names():
        from ...errors import UsageError

        raise UsageError(f"unknown dialect {name!r}: choose one of {', '.join(names())}")
    module, _, attr = _registered.get(name, f"{__name__}.{name.replace('-', '_')}:DIALECT").partition(":")
    dialect = getattr(importlib.import_module(module), attr)
    if dialect.name != name:
        raise ValueError(f"{module}:{attr} is the dialect {dialect.name!r}, not {name!r}")
    return dialect


def tools_of(runner) -> list:
    """The specs an agent of this runner sees: its dialect's, or runner's own."""
    d = getattr(runner, "dialect", None)
    return d.specs(runner) if d is not None else runner.tools()
