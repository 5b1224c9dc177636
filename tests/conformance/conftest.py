import pytest

from .backends import BACKENDS


@pytest.fixture(params=list(BACKENDS))
def sandbox(request, tmp_path):
    """(executor, workspace-in-sandbox, traits) for every backend in turn."""
    if request.param.startswith("docker"):  # the engine's backends leave no container behind
        request.getfixturevalue("no_leaks")
    with BACKENDS[request.param](tmp_path) as pair:
        yield pair
