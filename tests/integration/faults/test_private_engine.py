"""The private engines of the fault tests touch nothing of the machine's own engine."""
from __future__ import annotations

import subprocess

import pytest

from .privengine import PrivateEngine


def _bridge() -> bool:
    return subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode == 0


@pytest.mark.docker
def test_a_private_engine_leaves_the_hosts_default_bridge_alone():
    """dockerd started with --bridge=none deletes any link named docker0 it can see: in the
    machine's network namespace that was the main engine's bridge (every `docker run` on the
    default network failed after the fault tests had run)."""
    if not _bridge():
        pytest.skip("the machine's engine has no docker0 bridge to lose")
    engine = PrivateEngine()
    try:
        engine.start()
        assert engine.answers()
        assert _bridge(), "the private engine deleted the machine's docker0"
    finally:
        engine.destroy()
    assert _bridge()
