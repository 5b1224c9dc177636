"""Shared fixtures: the real Docker engine, and a check that no test leaves a container behind."""
from __future__ import annotations

import os

import pytest

TEST_LABEL = "runner.test"


def pytest_sessionstart(session):
    """First remove what an earlier run left when it was killed (tests/leftovers.py)."""
    import sys

    from .leftovers import sweep

    for what in sweep(engine=not os.environ.get("RUNNER_TEST_NO_DOCKER")):
        print(f"removed a killed test run's leftover: {what}", file=sys.stderr)


@pytest.fixture(scope="session", autouse=True)
def _audit_log_in_tmp(tmp_path_factory):
    """Tests never write to the user's audit log."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RUNNER_AUDIT_LOG", str(tmp_path_factory.mktemp("audit") / "audit.jsonl"))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def docker_client():
    """The real engine. No engine is an error, not a skip: CI always starts one (make test)."""
    from executors.docker.engine import connect

    return connect()


def _ours(client) -> dict[str, dict]:
    # The low-level list: one request, no per-container inspect that races with removals.
    return {c["Id"]: c["Labels"] for c in client.api.containers(all=True, filters={"label": "runner.managed=true"})}


def _leaked(labels: dict) -> bool:
    """Made by this process, or by a process it started that is gone (a CLI run by the test).
    Containers of other processes (another test run on this machine, and what its CLIs left
    for a moment) are not this test's."""
    from executors.docker import labels as L

    me = str(os.getpid())
    if labels.get(L.OWNER_PID) == me:
        return True
    return labels.get(L.OWNER_PARENT) == me and L.orphan_reason(labels) is not None


@pytest.fixture
def no_leaks(docker_client):
    """Fail a test that leaves a runner container behind (and remove what it left)."""
    before = _ours(docker_client)
    yield
    from runner.controller import finisher

    finisher.wait(timeout=120)  # the removals a closing Runner left to run after its answer
    left = {cid for cid, labels in _ours(docker_client).items() if cid not in before and _leaked(labels)}
    for cid in left:
        try:
            docker_client.api.remove_container(cid, force=True)
        except Exception:
            pass
    assert not left, f"test left {len(left)} runner container(s) behind"


@pytest.fixture(scope="session", autouse=True)
def _final_sweep():
    """After the whole suite: no container of this test process may remain."""
    yield
    if os.environ.get("RUNNER_TEST_NO_DOCKER"):
        return
    try:
        from executors.docker.engine import connect

        client = connect()
    except Exception:
        return
    for c in client.api.containers(all=True, filters={"label": f"runner.owner.pid={os.getpid()}"}):
        client.api.remove_container(c["Id"], force=True)


ENGINE_FIXTURES = {"docker_client", "no_leaks", "swarm_cluster", "cluster", "engine", "private_engine"}
SSHD_FIXTURES = {"sshd", "ssh_config"}


def pytest_collection_modifyitems(config, items):
    """Markers by what a test needs. `docker` (the engine): the tests marked by hand, the ones
    using an engine fixture, and the docker variants of parametrized tests (an id part starting
    with docker, swarm or runsc). `sshd` (a real sshd on loopback, seconds per test): its fixtures, and the ssh
    variants. `make test-fast` runs the rest with no engine reachable, so a test that needs one
    and is not marked fails there instead of passing by luck."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        ids = callspec.id.split("-") if callspec is not None else []
        names = set(getattr(item, "fixturenames", ()))
        if ENGINE_FIXTURES & names or any(p.startswith(("docker", "swarm", "runsc")) for p in ids):
            item.add_marker(pytest.mark.docker)
        if SSHD_FIXTURES & names or "ssh" in ids:
            item.add_marker(pytest.mark.sshd)
