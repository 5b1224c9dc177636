"""What gets mounted: a policy mount whose source the workspace can influence never follows a link
the sandbox planted, and `runner exec --mount` (and policy mounts) refuse a source by what it is
(a socket, a device, a directory holding one, the kernel's trees), not by its name."""
from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from runner import Runner
from runner.errors import RunnerError, UsageError
from runner.cli.exec_cmd import ExecOptions, build_config

from .test_protection import LIMITS, chown_tree


@pytest.fixture
def places(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    return ws, outside


def runner_with_mount(ws: Path, source: str, **kw) -> Runner:
    return Runner(executor="docker", workspace=ws, preset="all",
                  overrides={**LIMITS, "mounts": [{"source": source, "target": "/cache", "mode": "rw"}],
                             **kw.pop("overrides", {})}, **kw)


# -- case 7: sources in the workspace ----------------------------------------------------------------
@pytest.mark.parametrize("source", ["cache", "cache/sub", "{ws}/cache", "{ws}/cache/sub", "./x/../cache"])
def test_a_link_planted_as_a_mount_source_is_refused(places, no_leaks, source):
    ws, outside = places
    (outside / "sub").mkdir()
    (ws / "cache").symlink_to(outside)  # what an earlier session left: rm -rf cache && ln -s /host/dir cache
    with pytest.raises(RunnerError, match="cache is a symbolic link"):
        with runner_with_mount(ws, source.format(ws=ws)) as r:
            r.call("bash", {"command": "echo pwned > /cache/secret.txt"})
    assert (outside / "secret.txt").read_text() == "host secret\n"


def test_an_operator_path_through_the_workspace_is_walked_too(places, tmp_path, no_leaks):
    ws, outside = places
    (ws / "cache").symlink_to(outside)
    (tmp_path / "data").symlink_to(ws)  # the operator's link into the workspace: /data/cache
    with pytest.raises(RunnerError, match="passes through the workspace"):
        runner_with_mount(ws, str(tmp_path / "data" / "cache"))


def test_a_relative_mount_source_may_not_leave_the_workspace(places, no_leaks):
    ws, outside = places
    with pytest.raises(RunnerError, match="leaves it"):
        runner_with_mount(ws, "../outside")


def test_the_sandbox_cannot_swap_a_mount_source_and_a_later_one_refuses_it(places, no_leaks):
    ws, outside = places
    (ws / "cache").mkdir()
    (ws / "cache" / "data").write_text("mine\n")
    chown_tree(ws)
    with runner_with_mount(ws, "cache", lifecycle="per-call", pool_size=0) as r:
        res = r.call("bash", {"command": "mv cache c2 || rmdir cache"})
        assert "Device or resource busy" in res.content, res.content
        assert r.call("bash", {"command": "cat /cache/data"}).content.strip() == "mine"
        os.rename(ws / "cache", ws / "c2")  # as if a sandbox of another session had done it
        (ws / "cache").symlink_to(outside)
        res = r.call("bash", {"command": "cat /cache/secret.txt"})
        assert res.is_error and "cache is a symbolic link" in res.content, res.content
        assert "host secret" not in res.content


@pytest.mark.parametrize("swapped", ["protected", "pin"])
def test_a_source_swapped_for_a_link_after_the_check_never_reaches_the_sandbox(tmp_path, no_leaks, monkeypatch, swapped):
    """The engine resolves a mount's source by name when it starts the container, following links:
    a protected directory (or a pin, its ancestor, mounted read-write) swapped for a link to
    /srv between runner's check and the engine's start handed the sandbox the host's /srv (the
    link resolves inside the container too, where /srv exists). The executor now finds, from
    /proc/PID/root, that the mount at the target is not what runner checked, and removes the
    container before anything of it ran: the session does not start."""
    import uuid

    from executors.docker import wire
    from executors.errors import InvalidConfig

    ws = tmp_path / "ws"
    host = Path("/srv") / f"runner-test-{uuid.uuid4().hex[:12]}"  # exists on the host (our own, made
    host.mkdir()                                                   # here) and, through the pin, in the sandbox
    (host / "host-file").write_text("host file\n")
    (ws / "keep" / host.name).mkdir(parents=True)
    chown_tree(ws)
    real = wire.Engine.json

    def json(self, method, path, *a, **kw):  # the swap, as a sandbox racing the next one's start would
        if method == "POST" and path.endswith("/start") and not (ws / "keep").is_symlink():
            os.rename(ws / "keep", ws / "keep.real")
            (ws / "keep").symlink_to("/srv")
        return real(self, method, path, *a, **kw)

    monkeypatch.setattr(wire.Engine, "json", json)
    protect = ["keep"] if swapped == "protected" else [f"keep/{host.name}"]  # keep: read-only, or the pin
    try:
        with pytest.raises(InvalidConfig, match="mount at /workspace/keep is not the .* runner checked"):
            with Runner(executor="docker", workspace=ws, preset="all", protect=protect, pool_size=0) as r:
                res = r.call("bash", {"command": f"cat /srv/{host.name}/host-file; touch /srv/{host.name}/written"})
                pytest.fail(f"the sandbox started and read: {res.text!r}")
        assert not (host / "written").exists()
    finally:
        shutil.rmtree(host)


def test_a_mounts_identity_is_reached_with_no_link_followed(tmp_path):
    import errno

    from executors.docker.mounts import identity

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "l").symlink_to(tmp_path / "a")
    st = os.stat(tmp_path / "a" / "b")
    assert identity(str(tmp_path), "a/b") == identity(str(tmp_path), "/a/./b/") == (st.st_dev, st.st_ino)
    for bad, code in (("l/b", errno.ELOOP), ("l", errno.ELOOP), ("a/../a/b", errno.EINVAL), ("a/c", errno.ENOENT)):
        with pytest.raises(OSError) as e:
            identity(str(tmp_path), bad)
        assert e.value.errno == code, (bad, e.value)


# -- case 9: refused by what a source is ---------------------------------------------------------------
def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


@pytest.fixture
def hostile_sources(tmp_path) -> dict[str, Path]:
    out = {}
    out["socket"] = _socket(tmp_path / "engine.sock")
    os.link(out["socket"], tmp_path / "innocent.txt")  # a hard link: same socket, harmless name
    out["hard link to a socket"] = tmp_path / "innocent.txt"
    (tmp_path / "run" / "deep" / "er").mkdir(parents=True)
    _socket(tmp_path / "run" / "deep" / "er" / "containerd.sock")
    out["directory holding a socket"] = tmp_path / "run"
    (tmp_path / "link").symlink_to(out["socket"])
    out["link to a socket"] = tmp_path / "link"
    os.mknod(tmp_path / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    out["device"] = tmp_path / "null"
    (tmp_path / "devs").mkdir()
    os.mknod(tmp_path / "devs" / "disk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    out["directory holding a device"] = tmp_path / "devs"
    for t in ("/proc", "/sys", "/dev", "/proc/self", "/sys/kernel", "/dev/shm"):
        if os.path.exists(t):
            out[t] = Path(t)
    return out


def test_exec_refuses_a_mount_by_what_the_source_is(hostile_sources):
    for what, src in hostile_sources.items():
        with pytest.raises(UsageError, match="refusing to mount") as e:
            build_config(ExecOptions(cmd=["true"], mounts=[f"{src}:/x"]))
        assert "--force-unsafe-mounts" in str(e.value), what
        build_config(ExecOptions(cmd=["true"], mounts=[f"{src}:/x"], force_unsafe_mounts=True))


def test_exec_still_mounts_ordinary_folders(tmp_path):
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "deep" / "a.py").write_text("x\n")
    (tmp_path / "src" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "src" / "fifo")
    cfg = build_config(ExecOptions(cmd=["true"], mounts=[f"{tmp_path / 'src'}:/src:ro"]))
    assert cfg.mounts[0].source == str(tmp_path / "src")


def test_the_cli_says_it_in_one_line(run_cli_here, tmp_path):
    sock = _socket(tmp_path / "s")
    os.link(sock, tmp_path / "notes")
    p = run_cli_here("exec", "-v", f"{tmp_path / 'notes'}:/n", "--", "true")
    err = p.stderr.decode()
    assert p.returncode != 0 and "it is a socket" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.fixture
def run_cli_here():
    from tests.integration.cli.conftest import runner_cmd
    import subprocess

    def run(*args: str):
        return subprocess.run(runner_cmd(*args), input=b"", capture_output=True, timeout=120)

    return run


def test_a_policy_mount_of_a_directory_holding_a_socket_is_refused(places, no_leaks):
    ws, outside = places
    _socket(outside / "agent.sock")
    with pytest.raises(Exception, match="holds a socket"):
        with runner_with_mount(ws, str(outside)) as r:
            r.call("bash", {"command": "ls /cache"})
