"""`runner snapshot list|show|rm` and `runner session --snapshot ID`, as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner import Runner

pytestmark = pytest.mark.usefixtures("no_leaks")


def cli(*args: str, env: dict, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_list_show_session_from_it_and_rm(tmp_path, monkeypatch):
    env = {"RUNNER_DATA": str(tmp_path / "data")}
    monkeypatch.setenv("RUNNER_DATA", env["RUNNER_DATA"])
    (tmp_path / "ws").mkdir()
    with Runner(executor="docker", workspace=tmp_path / "ws") as r:
        r.call("bash", {"command": "echo from-snapshot > f.txt; echo tmp-too > /tmp/t"})
        sid = r.snapshot("cli")
    listed = cli("snapshot", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [(m["id"], m["name"]) for m in json.loads(listed.stdout)] == [(sid, "cli")]
    assert sid in cli("snapshot", "list", env=env).stdout
    shown = json.loads(cli("snapshot", "show", sid, env=env).stdout)
    assert shown["id"] == sid and shown["processes"] is False and shown["not_captured"]

    (tmp_path / "new").mkdir()
    call = json.dumps({"id": 1, "tool": "bash", "args": {"command": "cat f.txt /tmp/t"}}) + "\n"
    p = cli("session", "-w", str(tmp_path / "new"), "--snapshot", sid, env=env, stdin=call)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["content"] == "from-snapshot\ntmp-too\n"
    p = cli("session", "-w", str(tmp_path / "new"), "--snapshot", sid, env=env, stdin=call)
    assert p.returncode != 0 and "not empty" in p.stderr  # a workspace that is not empty is refused

    assert cli("snapshot", "rm", sid, env=env).returncode == 0
    gone = cli("snapshot", "show", sid, env=env)
    assert gone.returncode == 1 and "no snapshot" in gone.stderr
    assert json.loads(cli("snapshot", "list", "--json", env=env).stdout) == []
