"""The two-node swarm, shared by tests/swarm and the conformance battery: made once per test
session, on first use, and removed when the last user's session-scoped fixture ends."""
from __future__ import annotations

import pytest

from .cluster import Cluster

_shared: dict = {"cluster": None, "users": 0}


@pytest.fixture(scope="session")
def swarm_cluster():
    if _shared["cluster"] is None:
        _shared["cluster"] = Cluster().__enter__()
    _shared["users"] += 1
    try:
        yield _shared["cluster"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            cluster, _shared["cluster"] = _shared["cluster"], None
            cluster.close()
