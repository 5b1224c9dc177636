"""The two-node swarm, shared by tests/integration/swarm, the conformance battery and the tool-behaviour
table: made once per test session, on first use, and removed when the last user's
session-scoped fixture ends; then the main engine must be as it was found."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from .cluster import Cluster, sh

_shared: dict = {"cluster": None, "users": 0}


def _engine_state() -> dict:
    return {"swarm": sh("docker", "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.NodeID}}"),
            "networks": sorted(sh("docker", "network", "ls", "--format", "{{.Name}}").split())}


@pytest.fixture(scope="session")
def swarm_cluster():
    if _shared["cluster"] is None:
        _shared["before"] = _engine_state()
        _shared["cluster"] = Cluster().__enter__()
    _shared["users"] += 1
    try:
        yield _shared["cluster"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            cluster, _shared["cluster"] = _shared["cluster"], None
            cluster.close()
            after = _engine_state()
            before = _shared["before"]
            # other helpers' networks may come and go meanwhile: only swarm's own are compared
            swarm_nets = {"docker_gwbridge", "ingress"}
            assert after["swarm"] == before["swarm"], (before, after)
            assert set(after["networks"]) & swarm_nets == set(before["networks"]) & swarm_nets, (before, after)
            assert not os.path.exists(f"/var/run/netns/{cluster.netns}") and not cluster.data_root.exists()
            assert not Path(f"/sys/class/net/{cluster.veth_host}").exists()
