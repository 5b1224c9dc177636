"""The OCI runtime of a sandbox whose config names none (executors/docker/runtimes.py): crun where
the engine offers it, the config's where it names one, the engine's default otherwise; and the
real engine's containers made that way by each path that makes them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from unittest import mock

import pytest

from executors.docker import labels as L
from executors.docker import runtimes


@pytest.fixture
def fresh_info():
    """An empty cache of engines' info for the test (and the process's own back after it)."""
    with mock.patch.dict(runtimes._info, clear=True):
        yield


def test_the_configured_runtime_wins_and_the_engine_is_not_asked(fresh_info):
    def fetch():
        raise AssertionError("asked the engine")

    assert runtimes.chosen("runsc", "e", fetch) == "runsc"
    assert runtimes.chosen("runc", "e", fetch) == "runc"


def test_crun_where_the_engine_offers_it_else_the_engines_default(fresh_info):
    assert runtimes.chosen(None, "a", lambda: {"Runtimes": {"runc": {}, "crun": {}}}) == "crun"
    assert runtimes.chosen(None, "b", lambda: {"Runtimes": {"runc": {}, "runsc": {}}}) is None
    assert runtimes.chosen(None, "c", lambda: {}) is None
    assert runtimes.chosen(None, "d", lambda: {"Runtimes": {"runc": {}, "crun": {}},
                                               "DefaultRuntime": "io.containerd.runc.v2"}) == "crun"


def test_an_engine_whose_default_is_not_runc_keeps_it(fresh_info):
    """An engine made to run gVisor by default (or anything else) was set up that way on purpose:
    crun beside it must not take the sandboxes onto the host's kernel."""
    offered = {"runc": {}, "crun": {}, "runsc": {}}
    assert runtimes.chosen(None, "a", lambda: {"Runtimes": offered, "DefaultRuntime": "runsc"}) is None
    assert runtimes.chosen(None, "b", lambda: {"Runtimes": offered, "DefaultRuntime": "kata"}) is None
    assert runtimes.chosen(None, "c", lambda: {"Runtimes": offered, "DefaultRuntime": "runc"}) == "crun"


def test_an_engine_is_asked_once_and_a_failed_answer_is_not_kept(fresh_info):
    asked = []

    def fetch():
        asked.append(1)
        if len(asked) == 1:
            raise OSError("the engine hung up")
        return {"Runtimes": {"crun": {}}}

    assert runtimes.chosen(None, "e", fetch) is None  # (its default: it could not say)
    assert runtimes.chosen(None, "e", fetch) == "crun"
    assert runtimes.chosen(None, "e", fetch) == "crun"
    assert len(asked) == 2


# -- the real engine -----------------------------------------------------------------------------
@pytest.fixture
def crun_offered(docker_client):
    offered = docker_client.info().get("Runtimes") or {}
    assert "crun" in offered, ("the engine lists no crun: scripts/setup.sh registers it where it can run a "
                               f"container (see its output); the engine has {sorted(offered)}")


def _runtime_of(docker_client, cid: str) -> str:
    return docker_client.api.inspect_container(cid)["HostConfig"]["Runtime"]


@pytest.mark.docker
@pytest.mark.parametrize("lifecycle", ["per-call", "per-session"])
@pytest.mark.parametrize("runtime", [None, "runc"])
def test_the_executors_containers_run_under_crun_unless_the_config_names_one(docker_client, no_leaks, crun_offered,
                                                                             lifecycle, runtime):
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    with DockerExecutor(lifecycle=lifecycle, runtime=runtime, labels={"runner.test": "runtimes"}) as ex:
        proc = ex.spawn(ExecRequest(argv=["sh", "-c", "echo up; sleep 30"]))
        try:
            assert next(iter(proc.output()))[1].startswith(b"up")
            cid = ex.container.id if lifecycle == "per-session" else proc.container.id
            assert _runtime_of(docker_client, cid) == (runtime or "crun")
        finally:
            proc.kill()
            proc.wait(timeout=10)
            proc.close()


@pytest.mark.docker
def test_runner_exec_runs_under_crun_where_the_engine_offers_it(docker_client, no_leaks, crun_offered):
    """`runner exec` (oneshot.py over wire.py): its container, looked at while the command runs."""
    child = subprocess.Popen([sys.executable, "-m", "runner", "exec", "--", "sh", "-c", "echo up; sleep 30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"
        found = docker_client.api.containers(filters={"label": f"{L.OWNER_PID}={child.pid}"})
        assert len(found) == 1, found
        assert _runtime_of(docker_client, found[0]["Id"]) == "crun"
    finally:
        child.send_signal(signal.SIGINT)  # (it removes its container, as on a user's ^C)
        child.communicate(timeout=30)


WRITABLE = r"""
for m in $(cut -d' ' -f2 /proc/self/mounts | sort -u); do
  p="$m/.runner-probe-$$"
  if ( : > "$p" ) 2>/dev/null; then rm -f "$p"; echo "$m"; fi
done
"""


@pytest.mark.docker
def test_a_sandbox_can_write_where_it_could_under_runc_and_nowhere_else(docker_client, no_leaks, crun_offered):
    """Every mount point the sandbox's user can create a file in, under crun and under runc: the
    same (/tmp, the workspace, /dev/shm). crun 1.8 on cgroup v1 made /sys/fs/cgroup a writable
    tmpfs (mode 1777) where runc mounts it read-only: hardening.READONLY_PATHS names it."""
    from executors.docker import DockerExecutor

    seen = {}
    for runtime in ("crun", "runc"):
        with DockerExecutor(lifecycle="per-call", runtime=runtime, labels={"runner.test": "runtimes"}) as ex:
            res = ex.run(["sh", "-c", WRITABLE])
            assert res.exit_code == 0, res
            seen[runtime] = set(res.stdout.decode().split())
    assert seen["crun"] == seen["runc"], seen
    assert "/tmp" in seen["crun"] and "/sys/fs/cgroup" not in seen["crun"], seen


@pytest.mark.docker
def test_a_timeout_kills_the_command_where_it_cannot_lead_a_session(docker_client, no_leaks, crun_offered):
    """Under crun a `docker exec` leads no session, and with no setsid(1) to be found the wrapper
    cannot make it one: the timeout's kill must still end the command, not leave it stopped."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    with DockerExecutor(lifecycle="per-session", runtime="crun", labels={"runner.test": "runtimes"}) as ex:
        res = ex.exec(ExecRequest(argv=["/bin/sh", "-c", "echo leader; /bin/sleep 1006; echo never"],
                                  env={"PATH": "/nonexistent"}, timeout=1))
        assert res.timed_out and b"never" not in res.stdout
        left = ex.exec(ExecRequest(argv=["ps", "-eo", "stat,args"])).stdout.decode()
        assert "echo leader" not in left, left


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_the_hosts_oom_killer_takes_a_sandbox_first(docker_client, no_leaks, crun_offered, runtime):
    """oom_score_adj 500 in the sandbox, under either runtime: crun applies none of 0 (the engine's
    default), and the sandbox kept the shim's own, which a systemd host sets below 0."""
    from executors.docker import DockerExecutor
    from executors.docker.hardening import OOM_SCORE_ADJ

    with DockerExecutor(lifecycle="per-call", runtime=runtime, labels={"runner.test": "runtimes"}) as ex:
        res = ex.run(["sh", "-c", "cat /proc/1/oom_score_adj /proc/self/oom_score_adj"])
    assert res.stdout.split() == [str(OOM_SCORE_ADJ).encode()] * 2, res


# -- a runtime the engine lists that cannot start a container ------------------------------------
BROKEN = "runner-test-broken"
DAEMON_JSON = "/etc/docker/daemon.json"


def _reload_dockerd() -> None:
    pid = subprocess.run(["pgrep", "-xo", "dockerd"], capture_output=True, text=True).stdout.strip()
    assert pid, "no dockerd to reload"
    os.kill(int(pid), signal.SIGHUP)


def _write_whole(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.runner-test-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _listed(docker_client, name: str) -> bool:
    return name in (docker_client.info().get("Runtimes") or {})


def _await(docker_client, name: str, want: bool) -> None:
    deadline = time.monotonic() + 30
    while _listed(docker_client, name) != want:
        assert time.monotonic() < deadline, f"dockerd did not reload its runtimes ({name} listed: {not want})"
        time.sleep(0.1)


@pytest.fixture
def broken_runtime_preferred(docker_client, monkeypatch):
    """A runtime the engine lists that can start no container (/bin/false), made the one runtimes
    takes where the engine offers it: as crun registered by hand on a host it cannot run on (this
    machine's hybrid cgroups were such a host for crun 1.8 until set-up mounted hugetlb as v1).
    Registered in the engine's daemon.json (as scripts/setup.sh registers crun; a reload touches
    no running container), which is given back byte for byte after."""
    from executors.docker.wire import DEFAULT_SOCKET, socket_path

    if os.geteuid() != 0 or socket_path() != DEFAULT_SOCKET or not os.path.isdir(os.path.dirname(DAEMON_JSON)):
        pytest.skip("registering a runtime needs root and this machine's engine (scripts/setup.sh's)")
    before = open(DAEMON_JSON, "rb").read() if os.path.exists(DAEMON_JSON) else None
    mode = os.stat(DAEMON_JSON).st_mode & 0o7777 if before is not None else 0o644
    cfg = json.loads(before) if before and before.strip() else {}
    cfg.setdefault("runtimes", {})[BROKEN] = {"path": "/bin/false"}
    _write_whole(DAEMON_JSON, json.dumps(cfg, indent=2).encode(), mode)
    try:
        _reload_dockerd()
        _await(docker_client, BROKEN, True)
        monkeypatch.setattr(runtimes, "PREFERRED", BROKEN)
        with mock.patch.dict(runtimes._info, clear=True), mock.patch.dict(runtimes._refused, clear=True):
            yield
    finally:
        if before is None:
            os.unlink(DAEMON_JSON)
        else:
            _write_whole(DAEMON_JSON, before, mode)
        _reload_dockerd()
        deadline = time.monotonic() + 30  # (no assertion here: it would hide the test's own failure)
        while _listed(docker_client, BROKEN) and time.monotonic() < deadline:
            time.sleep(0.1)


def _no_broken_left(docker_client) -> None:
    """This process's containers only (the executors, runner exec and doctor run in it): an inspect
    of another run's container waits on that container's lock, which its own run may hold for
    minutes (a parallel worker's gVisor flood held it past the client's 120 s read timeout)."""
    mine = [L.MANAGED, f"{L.OWNER_PID}={os.getpid()}"]
    left = [c["Id"][:12] for c in docker_client.api.containers(all=True, filters={"label": mine})
            if docker_client.api.inspect_container(c["Id"])["HostConfig"]["Runtime"] == BROKEN]
    assert not left, f"containers made under the broken runtime were left: {left}"


@pytest.mark.docker
@pytest.mark.parametrize("path", ["per-call", "per-call-sdk", "per-session"])
def test_a_chosen_runtime_that_cannot_start_a_sandbox_gives_way_to_the_engines_default(
        docker_client, no_leaks, broken_runtime_preferred, path):
    """The runtime runner chose (no config named one) could not start the container: it is made
    again under the engine's default, which serves the engine from then on, with a warning. Each
    path that makes an executor's containers: wire.py's per-call, docker-py's, the session's."""
    from executors.docker import DockerExecutor

    kw = {"client": docker_client} if path == "per-call-sdk" else {}
    lifecycle = "per-session" if path == "per-session" else "per-call"
    with pytest.warns(runtimes.RuntimeFallback, match=BROKEN):
        with DockerExecutor(lifecycle=lifecycle, labels={"runner.test": "runtimes"}, **kw) as ex:
            res = ex.run(["sh", "-c", "echo ran; cat /proc/1/cgroup >/dev/null"])
            assert (res.exit_code, res.stdout) == (0, b"ran\n"), res
            assert ex.runtime() is None  # the engine's default from now on
            again = ex.run(["echo", "again"])
            assert again.stdout == b"again\n"
    assert runtimes.refused(f"client {docker_client.api.base_url}" if path == "per-call-sdk" else ex.engine)
    _no_broken_left(docker_client)


@pytest.mark.docker
def test_runner_exec_and_a_session_give_way_to_the_engines_default(docker_client, no_leaks, broken_runtime_preferred):
    """runner exec's path (oneshot.py) runs the command once, under the default, its stdin
    whole; a Runner's session sandbox (the agent as the container's init) starts."""
    import io

    from executors.docker import oneshot
    from executors.docker.config import SandboxConfig
    from executors.docker.wire import Engine, socket_path
    from runner import Runner

    got = []
    with pytest.warns(runtimes.RuntimeFallback):
        out = oneshot.run(Engine(socket_path()), SandboxConfig(labels={"runner.test": "runtimes"}), ["cat"],
                          stdin=io.BytesIO(b"fed once\n"), on_output=lambda stream, data: got.append(data))
    assert (out.exit_code, b"".join(got)) == (0, b"fed once\n")
    with Runner(executor="docker", workspace=".", preset="all") as r:  # (the engine's default already)
        assert r.call("bash", {"command": "echo hi"}).text == "hi\n"
    _no_broken_left(docker_client)


@pytest.mark.docker
def test_runner_exec_says_in_one_line_that_it_gave_way(docker_client, no_leaks, broken_runtime_preferred, capfd):
    """The CLI's notice of the fallback: one line on stderr, as its other notices are."""
    from runner import cli

    with pytest.raises(SystemExit) as ended:
        cli.main(["exec", "--", "echo", "hi"])
    out, err = capfd.readouterr()
    assert (ended.value.code, out) == (0, "hi\n")
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"runner: warning: {BROKEN} could not start a sandbox"), err
    _no_broken_left(docker_client)


@pytest.mark.docker
def test_a_start_the_default_cannot_make_either_keeps_the_choice(docker_client, no_leaks, broken_runtime_preferred):
    """A container the engine's default cannot start either was not the chosen runtime's fault:
    the caller gets the default's own error (here its working directory is a file), and the
    choice stands."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    with DockerExecutor(lifecycle="per-call", labels={"runner.test": "runtimes"}, init=False) as ex:
        with pytest.raises(Exception, match="not a directory"):
            ex.exec(ExecRequest(argv=["true"], cwd="/etc/passwd"))
        assert ex.runtime() == BROKEN
    assert runtimes.refused(ex.engine) is None
    _no_broken_left(docker_client)


@pytest.mark.docker
def test_runner_doctor_tries_the_runtime_it_would_pick(docker_client, no_leaks, broken_runtime_preferred):
    """`runner doctor` runs one hardened sandbox under the runtime it reports, and says when the
    engine lists one that cannot run here (which the engine's own `docker info` cannot tell)."""
    from runner.cli.maintenance import doctor

    rows = {what: (state, detail) for state, what, detail in doctor()}
    state, detail = rows["sandbox runtime"]
    assert state == "WARN" and detail.startswith(f"{BROKEN} is listed but could not run a sandbox here"), detail
    assert "OCI runtime" in detail and "falls back to the engine's default, runc" in detail, detail
    _no_broken_left(docker_client)
