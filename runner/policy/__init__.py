"""Policies: what may run, where, with which limits (model, loader, guards).

    from runner.policy import load
    policy = load("default").effective(protect=["secrets"])

Submodules: model (Policy), loader (load, show, check), ratelimit, protect, approval.
No Docker import happens here.
"""
from .loader import Problem, PolicyError, check, load, load_text, policy_dirs, preset_names, show
from .model import Policy, SecretUnavailable

__all__ = ["Policy", "PolicyError", "Problem", "SecretUnavailable", "check", "load", "load_text",
           "policy_dirs", "preset_names", "show"]
