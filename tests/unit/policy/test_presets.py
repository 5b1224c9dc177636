"""The presets in policies/ load cleanly and say what the issue asks of each."""
from __future__ import annotations

import pytest

from runner.policy import check, load, preset_names

PRESETS = ["default", "readonly", "ci", "multi-tenant", "local-dev"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_is_valid(name):
    assert check(name) == []
    assert load(name).name == name


def test_presets_listed():
    assert set(PRESETS) <= set(preset_names())


def test_default():
    p = load("default")
    assert (p.tools.preset, p.sandbox.executor, p.sandbox.lifecycle, p.network.mode) == \
        ("coding", "docker", "per-session", "none")
    assert p.protect_git_hooks and p.warnings() == []


def test_readonly():
    p = load("readonly")
    assert p.tools.preset == "readonly" and p.sandbox.workspace == "ro"
    assert not p.features.bash and not p.features.writes


def test_ci():
    p = load("ci")
    assert p.tools.preset == "coding"
    assert {"git_status", "git_diff", "git_log", "git_add", "git_commit"} <= set(p.tools.allow)
    assert p.host_commands == []  # enabled by the SSH issue
    from runner.policy.loader import find_policy

    assert "host_commands:" in find_policy("ci").read_text()


def test_multi_tenant():
    p = load("multi-tenant")
    assert p.sandbox.lifecycle == "per-call"
    d = load("default")
    assert p.limits.memory < d.limits.memory and p.limits.pids < d.limits.pids
    assert p.limits.max_timeout < d.limits.max_timeout
    assert p.rate_limits.session is not None and "bash" in p.rate_limits.tools


def test_local_dev_is_loud():
    p = load("local-dev")
    assert p.sandbox.executor == "local" and not p.is_sandboxed
    w = p.warnings()
    assert any("NOT a sandbox" in x for x in w) and any("NOT A SANDBOX" in x for x in w)
