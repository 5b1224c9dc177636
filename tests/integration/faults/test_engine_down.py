"""The engine down when a command starts: `runner call`, `exec`, `session` and `doctor` each say so
in one line and exit 69 (EX_UNAVAILABLE, documented in the README)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

RUNNER = str(Path(sys.executable).with_name("runner"))
ENGINE_DOWN = 69
CALL = ["call", "read", '{"path": "a.txt"}']
COMMANDS = {
    "call": CALL,
    "call-per-call": CALL + ["--policy", "multi-tenant"],
    "session": ["session"],
    "session-per-call": ["session", "--policy", "multi-tenant"],
    "exec": ["exec", "--", "true"],
    "doctor": ["doctor"],
}


@pytest.fixture
def engine_down(private_engine):
    """The private engine, stopped: its socket is gone, as after `systemctl stop docker`."""
    private_engine.stop()
    return private_engine


@pytest.mark.parametrize("name", COMMANDS)
def test_engine_down_at_start_is_one_line_and_exit_69(engine_down, workspace, name):
    (workspace / "a.txt").write_text("hi\n")
    env = {**os.environ, "DOCKER_HOST": engine_down.url}
    p = subprocess.run([RUNNER, *COMMANDS[name]], cwd=workspace, env=env, capture_output=True, text=True,
                       input='{"id": 1, "tool": "read", "args": {"path": "a.txt"}}\n', timeout=300)
    said = p.stdout if name == "doctor" else p.stderr
    quiet = p.stderr if name == "doctor" else p.stdout
    assert p.returncode == ENGINE_DOWN, (p.returncode, p.stdout, p.stderr)
    assert len(said.splitlines()) == 1, said
    assert f"no Docker engine answers at {engine_down.url}" in said, said
    assert quiet == "", quiet
