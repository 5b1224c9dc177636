"""acai (seed 001): its dynamic tools (Node scripts answering TOOL_ACTION) are called with the
`dynamic-` prefix; runner's own tools keep their names."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner import Runner

pytestmark = pytest.mark.usefixtures("no_leaks")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tools" / "describe-execute"
# The seed's own example tool, cut to what runs here (no npm): params as [{name, value}] on stdin.
RUN_CHECKS = r"""#!/usr/bin/env node
if (process.env.TOOL_ACTION === 'describe') {
  console.log(JSON.stringify({
    name: 'run-all-checks',
    description: 'Run all checks in a project workspace (typecheck, lint:fix, format)',
    parameters: [{ name: 'dir', type: 'string', description: 'the workspace directory to run checks in',
                   required: false, default: '.' }],
    needsApproval: false,
  }, null, 2));
  process.exit(0);
}
if (process.env.TOOL_ACTION === 'execute') {
  let params = [];
  process.stdin.setEncoding('utf8');
  process.stdin.on('readable', () => { let chunk; while (null !== (chunk = process.stdin.read())) { params = JSON.parse(chunk); } });
  process.stdin.on('end', () => {
    const dir = params.find(p => p.name === 'dir')?.value || '.';
    console.log('success - all checks pass in ' + dir);
    process.exit(0);
  });
}
"""


@pytest.fixture
def runner(tmp_path, docker_client):
    try:
        docker_client.images.get("runner/node:latest")
    except Exception:
        pytest.fail("no runner/node image: build it with `runner images build node` (make setup does)")
    ws = tmp_path / "ws"
    tools = ws / ".acai" / "tools"
    tools.mkdir(parents=True)
    shutil.copy2(EXAMPLES / "shout.mjs", tools / "shout.mjs")
    (tools / "run-all-checks.mjs").write_text(RUN_CHECKS)
    (ws / "sub").mkdir()
    with Runner(executor="docker", workspace=ws, preset="all", dialect="acai", image="runner/node:latest") as r:
        yield r


def test_dynamic_tools_are_prefixed(runner):
    names = [s.name for s in __import__("runner.tools.dialects", fromlist=["tools_of"]).tools_of(runner)]
    assert "dynamic-shout" in names and "dynamic-run-all-checks" in names
    assert "shout" not in names and "read" in names and "bash" in names  # runner's own keep their names
    res = runner.call("dynamic-shout", {"text": "hello"})
    assert not res.is_error and res.content == "HELLO"
    assert res.meta["dialect"] == "acai" and res.meta["dialect_tool"] == "dynamic-shout" and res.meta["tool"] == "shout"
    checks = runner.call("dynamic-run-all-checks", {})
    assert checks.content == "success - all checks pass in ."  # the default the tool declares
    assert runner.call("dynamic-run-all-checks", {"dir": "sub"}).content == "success - all checks pass in sub"
    unknown = runner.call("shout", {"text": "x"})
    assert unknown.is_error and unknown.content.startswith("unknown tool: shout. Tools that exist here (acai dialect)")


def test_runners_own_tools_under_their_names(runner):
    assert runner.call("write", {"path": "a.txt", "content": "x"}).content == "wrote 1 bytes to a.txt"
    assert runner.call("read", {"path": "a.txt"}).content == "     1\tx"
    assert runner.call("bash", {"command": "echo hi"}).content == "hi\n"
