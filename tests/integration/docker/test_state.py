"""Pause, resume, snapshots, restores and forks of docker sessions, against the real engine."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from runner import Runner
from runner.controller import snapshots as S

from ...unit.controller.test_snapshots import build, manifest

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def data(tmp_path, monkeypatch):
    d = tmp_path / "data"
    monkeypatch.setenv("RUNNER_DATA", str(d))
    return d


COUNTER = "sh -c 'i=0; while :; do i=$((i+1)); echo $i > count; sleep 0.05; done'"


def wait_for(cond, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def state_of(docker_client, r) -> str:
    cid, _ = S.container_of(r.session.live_sandbox())
    return docker_client.api.inspect_container(cid)["State"]["Status"]


def test_pause_freezes_the_sandbox_and_a_call_resumes_it(tmp_path, data, docker_client):
    with Runner(executor="docker", workspace=tmp_path, preset="all") as r:
        started = r.call("exec", {"command": COUNTER, "background": True})
        assert not started.is_error, started.text
        wait_for(lambda: (tmp_path / "count").exists())
        assert r.pause() is True
        assert state_of(docker_client, r) == "paused"
        frozen = (tmp_path / "count").read_text()
        time.sleep(0.5)  # ten beats of the loop, had it run
        assert (tmp_path / "count").read_text() == frozen
        assert r.pause() is True  # (again: nothing changes)
        out = r.call("bash", {"command": "echo answered"})
        assert out.text.strip() == "answered" and not out.is_error
        assert state_of(docker_client, r) == "running"
        assert r.resume() is False  # the call resumed it
        r.pause()
        assert r.resume() is True and state_of(docker_client, r) == "running"
        r.pause()  # closed while paused: removed all the same (no_leaks)


def test_pause_under_per_call_has_nothing_to_freeze(tmp_path, data):
    with Runner(executor="docker", workspace=tmp_path, lifecycle="per-call", pool_size=0) as r:
        assert r.pause() is False
        assert r.call("bash", {"command": "echo ok"}).text.strip() == "ok"


def test_a_snapshot_restores_workspace_tmp_env_and_cwd_byte_for_byte(tmp_path, data):
    ws, new = tmp_path / "ws", tmp_path / "new"
    ws.mkdir()
    new.mkdir()
    build(ws)
    os.unlink(ws / "fifo")
    (ws / "large.bin").write_bytes(os.urandom(40 * 1024 * 1024))
    probe = "pwd; env | grep -v ^HOSTNAME= | sort"
    with Runner(executor="docker", workspace=ws) as r:
        r.call("bash", {"command": "mkdir -p /tmp/t/empty && head -c 1000000 /dev/urandom > /tmp/t/b.bin && "
                                   "chmod 600 /tmp/t/b.bin && ln -s /etc/hostname /tmp/t/l && ln /tmp/t/b.bin /tmp/t/h"})
        tmp_before = r.call("bash", {"command": "cd /tmp/t && find . -printf '%p %y %m %n %l\\n' | sort; "
                                                "sha256sum b.bin"}).text
        seen_before = r.call("bash", {"command": probe}).text
        sid = r.snapshot("all-of-it")
        want = manifest(ws)
    meta = S.Store().meta(sid)
    assert meta["name"] == "all-of-it" and meta["cwd"] == "/workspace" and meta["processes"] is False
    assert any("processes" in n for n in meta["not_captured"])  # said, never restored silently
    with Runner(executor="docker", workspace=new, snapshot=sid) as r2:
        assert manifest(new) == want
        assert r2.call("bash", {"command": "cd /tmp/t && find . -printf '%p %y %m %n %l\\n' | sort; "
                                           "sha256sum b.bin"}).text == tmp_before
        assert r2.call("bash", {"command": probe}).text == seen_before


def test_a_workspace_that_is_not_empty_is_refused(tmp_path, data):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("x")
    with Runner(executor="docker", workspace=ws) as r:
        sid = r.snapshot()
    with pytest.raises(S.SnapshotError, match="not empty"):
        Runner(executor="docker", workspace=ws, snapshot=sid)
    with pytest.raises(S.NoSnapshot):
        Runner(executor="docker", workspace=tmp_path / "ws", snapshot="snap-0000000000000000")


def test_forks_are_independent_of_each_other_and_of_the_original(tmp_path, data):
    with Runner(executor="docker", workspace=tmp_path) as r:
        r.call("bash", {"command": "echo base > f.txt; echo base > /tmp/t.txt"})
        forks = r.fork(2)
        try:
            assert len(forks) == 2 and len({f.workspace for f in forks} | {r.workspace}) == 3
            for i, f in enumerate(forks):
                assert f.call("bash", {"command": "cat f.txt /tmp/t.txt"}).text.split() == ["base", "base"]
                f.call("bash", {"command": f"echo fork{i} > f.txt; echo fork{i} > /tmp/t.txt"})
            r.call("bash", {"command": "echo orig > f.txt"})
            for i, f in enumerate(forks):
                assert f.call("bash", {"command": "cat f.txt /tmp/t.txt"}).text.split() == [f"fork{i}"] * 2
            assert r.call("bash", {"command": "cat f.txt /tmp/t.txt"}).text.split() == ["orig", "base"]
            assert S.Store().list() == []  # the fork's own snapshot is gone once the forks started
        finally:
            for f in forks:
                f.close()


def test_per_call_snapshots_say_tmp_was_not_captured(tmp_path, data):
    with Runner(executor="docker", workspace=tmp_path, lifecycle="per-call", pool_size=0) as r:
        r.call("bash", {"command": "echo x > a"})
        sid = r.snapshot()
    meta = json.loads((Path(data) / "snapshots" / "-" / sid / "meta.json").read_text())
    assert any(n.startswith("/tmp") for n in meta["not_captured"])
