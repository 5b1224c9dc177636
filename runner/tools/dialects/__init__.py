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
"""
from __future__ import annotations

import importlib

NAMES = ("ah", "acai", "forgekeeper", "go-agent", "miclaw")
_MODULES = {"ah": "ah", "acai": "acai", "forgekeeper": "forgekeeper", "go-agent": "go_agent", "miclaw": "miclaw"}


def get(name: str | None):
    """The Dialect of that name; None for none."""
    if name is None:
        return None
    if name not in _MODULES:
        from ...errors import UsageError

        raise UsageError(f"unknown dialect {name!r}: choose one of {', '.join(NAMES)}")
    return importlib.import_module(f".{_MODULES[name]}", __name__).DIALECT


def tools_of(runner) -> list:
    """The specs an agent of this runner sees: its dialect's, or runner's own."""
    d = getattr(runner, "dialect", None)
    return d.specs(runner) if d is not None else runner.tools()
