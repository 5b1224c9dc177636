"""The JS formats (acai Node scripts, Forgekeeper .mjs modules) need node where they run:
on this machine for `local`, the runner/node image (runner images build node) for docker."""
from __future__ import annotations

import shutil

import pytest

from runner import Runner

from .conftest import install


@pytest.fixture
def node_runner(executor, workspace, request):
    overrides = {}
    if executor == "local" and not shutil.which("node"):
        pytest.skip("no node on this machine")
    if executor == "docker":
        try:
            request.getfixturevalue("docker_client").images.get("runner/node:latest")
        except Exception:
            pytest.skip("no runner/node image: build it with: runner images build node")
        overrides["sandbox.image"] = "runner/node:latest"

    made = []

    def make(**more):
        r = Runner(executor=executor, workspace=workspace, overrides={**overrides, **more})
        made.append(r)
        return r.start()

    yield make
    for r in made:
        r.close()


def test_forgekeeper_module(node_runner, workspace):
    install(workspace / "tools", "es-module/word_stats.mjs")
    (workspace / "t.txt").write_text("the cat and the dog and the end\n")
    r = node_runner()
    spec = next(s for s in r.tools() if s.name == "word_stats")
    assert (spec.kind, spec.source) == ("module", "project")
    assert spec.schema()["required"] == ["path"]
    res = r.call("word_stats", {"path": "t.txt"})
    assert not res.is_error and res.content == '{"words":8,"top":"the","top_count":3}'
    res = r.call("word_stats", {"path": "t.txt", "min_length": 4})
    assert res.is_error and "no words in t.txt" in res.content  # a thrown error is a tool error
    res = r.call("word_stats", {"path": "t.txt", "min_length": "long"})
    assert res.is_error and "min_length" in res.content


def test_acai_node_script(node_runner, workspace):
    install(workspace / ".acai" / "tools", "describe-execute/shout.mjs")
    r = node_runner()
    assert next(s for s in r.tools() if s.name == "shout").kind == "script"
    assert r.call("shout", {"text": "quiet"}).content == "QUIET"


@pytest.mark.usefixtures("no_leaks")
def test_without_node_the_reason_names_the_image(workspace):
    """runner/base has no node: the JS tools are skipped with a reason that says what to use."""
    install(workspace / "tools", "es-module/word_stats.mjs")
    install(workspace / ".acai" / "tools", "describe-execute/shout.mjs")  # `#!/usr/bin/env node`
    with Runner(executor="docker", workspace=workspace) as r:
        assert not {"word_stats", "shout"} & {s.name for s in r.tools()}
        why = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in r.custom_errors()}
        assert "cannot run node" in why["word_stats.mjs"] and "runner/node:latest" in why["word_stats.mjs"]
        assert "code 127" in why["shout.mjs"] and "runner/node:latest" in why["shout.mjs"]
