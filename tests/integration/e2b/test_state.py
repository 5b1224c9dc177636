"""The official e2b SDK against `runner serve`'s /e2b: pause (the engine's pause), connect and
auto-resume, auto-pause on timeout, paused sandboxes in the list, snapshots as templates, fork;
the tenant's snapshot store and quota (issue 47's), another tenant's sandbox or snapshot 404."""
from __future__ import annotations

import time

import pytest

from .conftest import e2b_containers


def _paused(docker_client, sid: str) -> bool:
    (c,) = e2b_containers(docker_client, sid)
    return docker_client.api.inspect_container(c["Id"])["State"]["Paused"]


def _wait_state(sbx, state, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s  # (a bound on the wait, not a figure the test asserts)
    while sbx.get_info().state != state:
        assert time.monotonic() < end, f"sandbox never became {state}"
        time.sleep(0.2)


def test_pause_freezes_and_connect_resumes_with_processes(as_tenant, docker_client):
    from e2b import Sandbox, SandboxQuery, SandboxState
    from e2b.exceptions import TimeoutException

    sbx = Sandbox.create("base", timeout=120)
    try:
        sbx.files.write("/home/user/kept.txt", "kept")
        bg = sbx.commands.run("sleep 600", background=True)
        assert sbx.pause() is True
        assert _paused(docker_client, sbx.sandbox_id)  # the engine's pause: cgroup freezer
        assert not sbx.is_running()
        assert sbx.get_info().state == SandboxState.PAUSED
        assert sbx.pause() is False  # paused already (409)
        with pytest.raises(TimeoutException):  # (the SDK's reading of E2B's 502: not running)
            sbx.files.read("/home/user/kept.txt")  # no auto-resume: envd is not there while paused
        listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert [s.state for s in listed if s.sandbox_id == sbx.sandbox_id] == [SandboxState.PAUSED]
        assert Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items() == []

        same = Sandbox.connect(sbx.sandbox_id)
        assert same.sandbox_id == sbx.sandbox_id
        assert not _paused(docker_client, sbx.sandbox_id)
        assert sbx.is_running() and sbx.get_info().state == SandboxState.RUNNING
        assert sbx.files.read("/home/user/kept.txt") == "kept"
        assert bg.pid in [p.pid for p in sbx.commands.list()]  # its process lived through the pause
    finally:
        sbx.kill()
    assert e2b_containers(docker_client, sbx.sandbox_id) == []  # a paused-then-killed one is gone too


def test_paused_sandbox_is_killed_whole(as_tenant, docker_client):
    from e2b import Sandbox

    sbx = Sandbox.create("base")
    sbx.pause()
    sbx.kill()
    assert e2b_containers(docker_client, sbx.sandbox_id) == []


def test_auto_pause_on_timeout_then_traffic_resumes(as_tenant, docker_client):
    from e2b import Sandbox, SandboxState

    sbx = Sandbox.create("base", timeout=1, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        sbx.files.write("/home/user/a.txt", "before")
        _wait_state(sbx, SandboxState.PAUSED)
        assert _paused(docker_client, sbx.sandbox_id)
        assert sbx.files.read("/home/user/a.txt") == "before"  # the request resumed it
        assert sbx.get_info().state == SandboxState.RUNNING
    finally:
        sbx.kill()


def test_auto_pause_without_auto_resume_needs_connect(as_tenant):
    from e2b import Sandbox, SandboxState

    sbx = Sandbox.create("base", timeout=1, lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        _wait_state(sbx, SandboxState.PAUSED)
        assert not sbx.is_running()
        sbx.connect(timeout=60)
        assert sbx.is_running() and sbx.get_info().state == SandboxState.RUNNING
    finally:
        sbx.kill()


def test_fork_copies_home_and_tmp_and_is_independent(as_tenant):
    from e2b import Sandbox

    data = as_tenant[3]
    sbx = Sandbox.create("base", timeout=120)
    forks = []
    try:
        sbx.files.write("/home/user/state.txt", "before fork")
        sbx.commands.run("echo tmp > /tmp/t.txt && mkdir -p /home/user/d/e && ln -s state.txt /home/user/link")
        forks = sbx.fork(count=2)
        assert len({f.sandbox_id for f in forks} | {sbx.sandbox_id}) == 3
        for f in forks:
            assert f.files.read("/home/user/state.txt") == "before fork"
            assert f.commands.run("cat /tmp/t.txt; readlink /home/user/link; test -d /home/user/d/e && echo dir;"
                                  " stat -c %U /home/user/state.txt").stdout == "tmp\nstate.txt\ndir\nuser\n"
        forks[0].files.write("/home/user/state.txt", "changed in fork 0")
        assert sbx.files.read("/home/user/state.txt") == "before fork"
        assert forks[1].files.read("/home/user/state.txt") == "before fork"
        assert sbx.is_running()
        assert list((data / "snapshots" / "alice").glob("snap-*")) == []  # the fork's snapshot went once they started
    finally:
        for f in forks:
            f.kill()
        sbx.kill()


def test_snapshot_is_a_template_of_its_tenant_only(as_tenant, monkeypatch):
    from e2b import Sandbox
    from e2b.exceptions import SandboxException, SandboxNotFoundException

    _url, _alice, bob, _data = as_tenant
    sbx = Sandbox.create("base", timeout=120)
    try:
        sbx.files.write("/home/user/s.txt", "in the snapshot")
        snap = sbx.create_snapshot()
        assert snap.snapshot_id.startswith("snap-")
        assert snap.snapshot_id in [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
        sbx.files.write("/home/user/s.txt", "after it")
        new = Sandbox.create(snap.snapshot_id)
        try:
            assert new.files.read("/home/user/s.txt") == "in the snapshot"
        finally:
            new.kill()
        monkeypatch.setenv("E2B_API_KEY", bob)  # another tenant: neither the snapshot nor the sandbox
        with pytest.raises(SandboxException):
            Sandbox.create(snap.snapshot_id)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.pause(sbx.sandbox_id)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.fork(sbx.sandbox_id)
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        monkeypatch.setenv("E2B_API_KEY", _alice)
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.list_snapshots().next_items() == []
    finally:
        sbx.kill()


def test_snapshot_quota_of_the_tenant(tmp_path, start_server, monkeypatch):
    from e2b import Sandbox
    from e2b.exceptions import RateLimitException

    from runner.servers.e2b.app import e2b_key

    from .conftest import POLICY, add_tenant, write_policy

    data = tmp_path / "data"
    data.mkdir()
    key = e2b_key(add_tenant("carol", data, write_policy(tmp_path, POLICY, "e2btiny")))
    srv = start_server("--data", str(data), env={"RUNNER_SERVE_MAX_SNAPSHOTS": "1"})
    for k in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(k, srv.url + "/e2b")
    monkeypatch.setenv("E2B_API_KEY", key)
    sbx = Sandbox.create("base")
    try:
        sbx.create_snapshot()
        with pytest.raises(RateLimitException):
            sbx.create_snapshot()  # the tenant's number of snapshots (429), as /v1's
        with pytest.raises(RateLimitException):
            sbx.fork()  # a fork takes a snapshot too
    finally:
        sbx.kill()


def test_filesystem_only_pause_frees_the_container_and_keeps_home_and_tmp(as_tenant, docker_client):
    from e2b import Sandbox, SandboxState

    sbx = Sandbox.create("base", timeout=120, secure=True)
    try:
        sbx.files.write("/home/user/m.txt", "persisted")
        sbx.commands.run("echo t > /tmp/t.txt")
        bg = sbx.commands.run("sleep 600", background=True)
        assert sbx.pause(keep_memory=False)
        assert e2b_containers(docker_client, sbx.sandbox_id) == []  # its memory freed: no container
        assert sbx.get_info().state == SandboxState.PAUSED
        assert not sbx.is_running()
        same = sbx.connect()
        assert same.sandbox_id == sbx.sandbox_id
        assert len(e2b_containers(docker_client, sbx.sandbox_id)) == 1
        assert sbx.files.read("/home/user/m.txt") == "persisted"  # its access token still holds
        assert sbx.commands.run("cat /tmp/t.txt").stdout == "t\n"
        assert bg.pid not in [p.pid for p in sbx.commands.list()]  # a cold boot: its processes ended
    finally:
        sbx.kill()
    assert e2b_containers(docker_client, sbx.sandbox_id) == []


def test_filesystem_only_paused_sandbox_killed_starts_nothing(as_tenant, docker_client):
    from e2b import Sandbox

    sbx = Sandbox.create("base")
    sbx.pause(keep_memory=False)
    sbx.kill()
    assert e2b_containers(docker_client, sbx.sandbox_id) == []
    assert Sandbox.list().next_items() == []
