import pytest

from ..swarm.fixtures import swarm_cluster  # noqa: F401
from .backends import BACKENDS, NEEDS_CLUSTER


@pytest.fixture(params=list(BACKENDS))
def sandbox(request, tmp_path):
    """(executor, workspace-in-sandbox, traits) for every backend in turn."""
    if request.param.startswith("docker"):  # the engine's backends leave no container behind
        request.getfixturevalue("no_leaks")
    if request.param in NEEDS_CLUSTER:
        with NEEDS_CLUSTER[request.param](tmp_path, request.getfixturevalue("swarm_cluster")) as pair:
            yield pair
        return
    with BACKENDS[request.param](tmp_path) as pair:
        yield pair
