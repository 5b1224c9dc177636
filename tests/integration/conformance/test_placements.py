"""The placement half's conformance battery (runner/backends/conformance.py): every backend's
Placement must pass all of it, against the real thing, as every Executor passes
executors/conformance.py. One test per check and backend."""
from __future__ import annotations

import os
import uuid

import pytest

from runner import backends
from runner.backends import conformance
from runner.backends.base import Setting
from runner.policy import Policy

PLACEMENTS = ["local", "docker"]


@pytest.fixture(params=PLACEMENTS)
def placement(request, tmp_path):
    if request.param.startswith("docker"):  # the engine's backends leave no container behind
        request.getfixturevalue("no_leaks")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(ws, 0o777)
    policy = Policy.model_validate({"sandbox": {"executor": request.param}})
    p = backends.for_policy(request.param).placement(Setting(ws, policy, f"conformance-{uuid.uuid4().hex[:8]}"))
    try:
        yield p
    finally:
        p.close()


@pytest.mark.parametrize("check", list(conformance.CHECKS))
def test_check(placement, check):
    try:
        conformance.CHECKS[check](placement)
    except conformance.Skip as e:
        pytest.skip(str(e))


def test_run_reports_each_check(tmp_path):
    """run() answers every check by name: None when it passed, why when it was skipped or failed."""
    from runner.backends.local import LocalPlacement

    p = backends.for_policy("local").placement(Setting(tmp_path, Policy.model_validate(
        {"sandbox": {"executor": "local"}}), "s1"))
    report = conformance.run(p, only=["the_workspace_maps_both_ways", "remove_sandboxes_ends_a_call_under_way"])
    assert report == {"the_workspace_maps_both_ways": None,
                      "remove_sandboxes_ends_a_call_under_way":
                          "skipped: this placement's sandboxes are processes of this machine: nothing to remove"}

    class Wrong(LocalPlacement):
        def host_path(self, path: str) -> str:
            return "/elsewhere" + path

    report = conformance.run(Wrong(p.config, p.setting), only=["the_workspace_maps_both_ways"])
    assert report["the_workspace_maps_both_ways"].startswith("AssertionError")
