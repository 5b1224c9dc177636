"""Policies: what may run, where, with which limits (model, loader, guards).

    from runner.policy import load
    policy = load("default").effective(protect=["secrets"])

Submodules: model (Policy), loader (load, show, check), ratelimit, protect, approval.
Exports are lazy: `runner.policy.protect` and `runner.policy.approval` import only the standard
library, and nothing here imports Docker.
"""
from __future__ import annotations

_EXPORTS = {
    "Policy": "model", "SecretUnavailable": "model",
    "PolicyError": "problems", "Problem": "problems", "check": "loader", "load": "loader", "load_text": "loader",
    "policy_dirs": "loader", "preset_names": "loader", "show": "loader",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'runner.policy' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
