"""Each hardening default of the docker backend, checked from inside a real container."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from executors.docker import DockerExecutor
from executors.models import ExecRequest, Limits

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_gvisor_gives_the_sandbox_its_pids_limit_in_processes(docker_client):
    """Under runsc the host pids cgroup also counts gVisor's own tasks (about 11 per guest process
    on the ptrace platform): a limit of 64 left room for no more than a couple of processes, and
    the sandbox then died whole (exit status 2, a panic in gVisor). The limit means processes."""
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("runsc (gVisor) is not configured on this engine; `runner doctor` says how")
    with DockerExecutor(runtime="runsc", limits=Limits(pids=64), labels={"runner.test": "hardening"}) as ex:
        res = ex.run(["sh", "-c", "for i in $(seq 40); do sleep 3 & done; wait; echo ok"])
        assert (res.exit_code, res.stdout) == (0, b"ok\n"), res
        bomb = ex.run(["bash", "-c", "b() { b | b & }; b; sleep 60"], timeout=10)
        assert bomb.exit_code != 0  # stopped: by the limit, or by runner at the timeout
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


@pytest.fixture
def box():
    with DockerExecutor(limits=Limits(memory="128m", pids=64), labels={"runner.test": "hardening"}) as ex:
        yield ex


def status_fields(ex) -> dict[str, str]:
    text = ex.run(["cat", "/proc/self/status"]).stdout.decode()
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def test_no_capabilities_at_all(box):
    st = status_fields(box)
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[field], 16) == 0, f"{field}={st[field]}"


def test_no_new_privileges_and_seccomp_filter(box):
    st = status_fields(box)
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"  # 2 = filter mode: the engine's default profile is loaded


def test_non_root_user_and_init_process(box):
    assert box.run(["id", "-u"]).stdout.strip() == b"1000"
    assert b"docker-init" in box.run(["cat", "/proc/1/cmdline"]).stdout


def test_root_filesystem_is_read_only_and_tmp_is_a_small_tmpfs(box):
    res = box.run(["sh", "-c", "touch /etc/x || touch /usr/x || touch /x"])
    assert res.exit_code != 0 and b"Read-only file system" in res.stderr
    assert box.run(["sh", "-c", "echo ok > /tmp/f && cat /tmp/f"]).stdout == b"ok\n"
    mounts = box.run(["cat", "/proc/mounts"]).stdout.decode().splitlines()
    tmp = next(line for line in mounts if line.split()[1] == "/tmp")
    assert tmp.split()[2] == "tmpfs" and "nosuid" in tmp and "nodev" in tmp and "size=65536k" in tmp


def test_memory_limit_with_swap_equal_and_cpu_and_pids(box, docker_client):
    hc = docker_client.api.inspect_container(box.container.id)["HostConfig"]
    assert hc["Memory"] == 128 * 2**20 and hc["MemorySwap"] == hc["Memory"]
    assert hc["PidsLimit"] == 64 and hc["NanoCpus"] == 10**9
    assert hc["NetworkMode"] == "none" and hc["ReadonlyRootfs"] and hc["Init"]
    assert hc["CapDrop"] == ["ALL"] and "no-new-privileges:true" in hc["SecurityOpt"]


def test_environment_is_only_what_was_granted(box, monkeypatch):
    monkeypatch.setenv("RUNNER_TEST_LEAK", "x")
    keys = {line.split("=", 1)[0] for line in box.run(["env"]).stdout.decode().splitlines()}
    assert keys <= {"PATH", "HOSTNAME", "HOME", "LANG", "PWD", "SHLVL", "_"}, keys


def test_labels_let_a_reaper_find_the_owner(box, docker_client):
    labels = docker_client.api.inspect_container(box.container.id)["Config"]["Labels"]
    assert labels["runner.managed"] == "true"
    assert labels["runner.owner.pid"] == str(os.getpid())
    assert labels["runner.owner.host"] == socket.gethostname()
    assert float(labels["runner.expires"]) > float(labels["runner.created"])
    assert labels["runner.session"] == box.config.session


def test_fork_bomb_is_stopped_by_the_pids_limit(box):
    bomb = "b() { b | b & }; b; sleep 60"
    res = box.exec(ExecRequest(argv=["bash", "-c", bomb], timeout=5))
    assert res.timed_out  # the bomb ran against the limit until runner killed its whole session
    events = box.run(["cat", "/sys/fs/cgroup/pids/pids.events"]).stdout
    if not events:  # cgroup v2
        events = box.run(["cat", "/sys/fs/cgroup/pids.events"]).stdout
    assert int(events.split()[-1]) > 0, "the pids limit was never hit"
    assert box.run(["echo", "alive"]).stdout == b"alive\n"
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


def test_memory_bomb_is_killed_with_137_and_reported_as_oom(box):
    res = box.run(["python3", "-c", "b = bytearray(600 * 2**20); print('survived')"])
    assert res.exit_code == 137 and res.oom_killed
    assert b"survived" not in res.stdout
    assert box.run(["echo", "alive"]).stdout == b"alive\n"


def test_a_per_call_containers_memory_bomb_is_reported_as_oom_too():
    """A per-call container on the local engine (wire.py's path): the run asks after the
    container is removed, so the engine's flag is taken before the removal."""
    with DockerExecutor(lifecycle="per-call", limits=Limits(memory="64m", pids=64), labels={"runner.test": "hardening"}) as ex:
        assert ex.wire_engine() is not None
        res = ex.run(["python3", "-c", "b = bytearray(512 * 2**20); print('survived')"])
    assert res.exit_code == 137 and res.oom_killed, res
    assert b"survived" not in res.stdout


def test_no_network_interfaces_and_no_route_to_the_host(box):
    dev = box.run(["cat", "/proc/net/dev"]).stdout.decode().splitlines()[2:]
    assert [line.split(":")[0].strip() for line in dev] == ["lo"]
    routes = box.run(["cat", "/proc/net/route"]).stdout.decode().splitlines()[1:]
    assert routes == []
    # A server on the host's loopback is not reachable: the container's 127.0.0.1 is its own.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        probe = f"import socket; s = socket.socket(); s.settimeout(3); s.connect(('127.0.0.1', {port}))"
        res = box.run(["python3", "-c", probe])
        assert res.exit_code != 0 and b"ConnectionRefused" in res.stderr
    finally:
        srv.close()


def test_loosening_takes_an_explicit_option(docker_client):
    with DockerExecutor(read_only_root=False, labels={"runner.test": "hardening"}) as ex:
        assert ex.run(["sh", "-c", "touch /home/runner/x"]).exit_code == 0


def test_gvisor_runtime_where_installed(docker_client):
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("runsc (gVisor) is not configured on this engine; `runner doctor` says how")
    with DockerExecutor(runtime="runsc", limits=Limits(memory="96m"), labels={"runner.test": "hardening"}) as ex:
        res = ex.run(["sh", "-c", "dmesg | head -1; id -u"])
        assert res.exit_code == 0 and b"gVisor" in res.stdout and res.stdout.endswith(b"1000\n")
        assert ex.exec(ExecRequest(argv=["sh", "-c", "sleep 30 & sleep 30"], timeout=1)).timed_out
        oom = ex.run(["python3", "-c", "x = bytearray(400 * 2**20)"])
        assert oom.exit_code == 137 and oom.oom_killed


@pytest.fixture
def docker_config_with_proxies(tmp_path, monkeypatch):
    """The user's docker client configuration naming proxies (docker-py injects them into every
    container it creates unless told not to)."""
    import json

    conf = tmp_path / "docker-config"
    conf.mkdir()
    proxy = "http://127.0.0.1:9"
    (conf / "config.json").write_text(json.dumps({"proxies": {"default": {
        "httpProxy": proxy, "httpsProxy": proxy, "ftpProxy": proxy, "noProxy": "runner-test.invalid"}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(conf))
    return conf


@pytest.mark.parametrize("lifecycle", ["per-call", "per-session"])
def test_the_users_docker_proxies_never_reach_a_sandbox(docker_config_with_proxies, lifecycle):
    """The environment is only what the sandbox is given: not the proxies of ~/.docker/config.json."""
    from executors.docker.engine import connect

    client = connect()  # a fresh client, which reads DOCKER_CONFIG
    try:
        with DockerExecutor(lifecycle=lifecycle, labels={"runner.test": "hardening"}, client=client) as ex:
            env = ex.run(["env"]).stdout.decode()
    finally:
        client.close()
    assert "127.0.0.1:9" not in env and "proxy" not in env.lower(), env
    if lifecycle == "per-call":  # and a sandbox's usual path on a local engine: wire.py, no docker-py
        with DockerExecutor(lifecycle=lifecycle, labels={"runner.test": "hardening"}) as ex:
            assert ex.wire_engine() is not None
            env = ex.run(["env"]).stdout.decode()
        assert "127.0.0.1:9" not in env and "proxy" not in env.lower(), env


def test_the_users_docker_proxies_never_reach_runner_exec(docker_config_with_proxies):
    p = subprocess.run([sys.executable, "-m", "runner", "exec", "--", "env"], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and b"127.0.0.1:9" not in p.stdout and b"proxy" not in p.stdout.lower(), p.stdout


@pytest.mark.docker
def test_requests_to_a_local_engine_look_up_no_proxy_and_no_netrc(monkeypatch):
    """requests looked for proxies (scanning the whole environment twice) and read ~/.netrc
    before every request to the engine's unix socket, where neither applies: a fifth of the
    controller's CPU for a per-call sandbox. A tcp:// engine keeps requests' defaults."""
    import requests.sessions
    import requests.utils

    from executors.docker.engine import connect

    looked: list = []
    for module in (requests.utils, requests.sessions):
        for name in ("get_environ_proxies", "get_netrc_auth"):
            if hasattr(module, name):
                real = getattr(module, name)
                monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: looked.append(_name) or _real(*a, **k))
    client = connect()
    looked.clear()  # (docker-py's version probe, as the client is made)
    client.ping()
    client.api.version()
    client.api.containers(filters={"label": "runner.test=none"})
    assert client.api.base_url.startswith("http+docker://") and looked == []
