"""`runner exec -p`: a server in the sandbox answered from the host on loopback, its egress still
closed (the host's own addresses included), and the network and firewall rules gone afterwards."""
from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import pytest

from .conftest import runner_cmd, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

# In the sandbox: try the host (its network's gateway, the bridge's address) at PROBE, then serve
# one connection on 8000 with "pong".
SERVER = r"""
import socket, struct, sys
routes = [line.split() for line in open("/proc/net/route").read().splitlines()[1:]]
address = lambda word: socket.inet_ntoa(struct.pack("<I", int(word, 16)))  # (the kernel's byte order)
gateways = [address(f[2]) for f in routes if f[1] == "00000000"]  # the default route's
nets = [address(f[1]) for f in routes if f[2] == "00000000"]  # else the bridge: the subnet's first address
gateway = gateways[0] if gateways else nets[0].rsplit(".", 1)[0] + ".1"
try:
    socket.create_connection((gateway, int(sys.argv[1])), timeout=3).close()
    print("host reached", flush=True)
except OSError as e:
    print("host closed", flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.sendall(b"pong " + c.recv(100))
c.close()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def host_listener():
    """A server on every address of the host (0.0.0.0): what a sandbox without egress must not reach."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen(8)
    got = []

    def serve():
        while True:
            try:
                c, addr = s.accept()
            except OSError:
                return
            got.append(addr)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    yield s.getsockname()[1], got
    s.close()


def _left(docker_client, pid: int):
    nets = docker_client.api.networks(filters={"label": f"runner.owner.pid={pid}"})
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout if shutil.which("iptables") else ""
    sessions = {n["Labels"].get("runner.session") for n in nets}
    return nets, [r for r in rules.splitlines() if any(f"runner-egress:{s}" in r for s in sessions)]


@pytest.mark.parametrize("network", ["none", "bridge"])
def test_a_published_port_is_answered_from_the_host(docker_client, host_listener, network):
    port = free_port()
    probe, reached = host_listener
    proc = subprocess.Popen(runner_cmd("exec", "--network", network, "-p", f"{port}:8000", "--timeout", "60", "--",
                                       "python3", "-c", SERVER, str(probe)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline()
        assert proc.stdout.readline() == b"ready\n"
        if network == "none":  # upstream DNS a dead end, as the allowlist mode's inside network
            (c,) = docker_client.api.containers(filters={"label": f"runner.owner.pid={proc.pid}"})
            assert docker_client.api.inspect_container(c["Id"])["HostConfig"]["Dns"] == ["127.0.0.1"]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"ping")
            answer = c.recv(100)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert answer == b"pong ping" and proc.returncode == 0, err
    if network == "none":  # egress stays none: not even the host's own addresses
        assert first == b"host closed\n" and reached == []
    assert wait_for(lambda: _left(docker_client, proc.pid) == ([], []))


def test_a_published_port_listens_on_loopback_only_by_default(docker_client):
    port = free_port()
    proc = subprocess.Popen(runner_cmd("exec", "-p", f"{port}:8000", "--", "sleep", "60"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def listening():
            out = subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True).stdout
            return out.strip()
        line = wait_for(listening)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert [x.split()[3] for x in line.splitlines()] == [f"127.0.0.1:{port}"], line


def test_a_port_in_use_is_runners_failure(run_cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        p = run_cli("exec", "-p", f"{s.getsockname()[1]}:80", "--", "true")
    err = p.stderr.decode()
    assert p.returncode == 125 and "cannot listen there" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("spec, says", [("80", "bad --publish"), ("1:2/udp", "only tcp"), ("x:1:2", "bad --publish"),
                                        ("1:70000", "ports are")])
def test_bad_publish_specs(run_cli, spec, says):
    p = run_cli("exec", "-p", spec, "--", "true")
    assert p.returncode == 125 and says in p.stderr.decode(), p.stderr


def test_what_a_killed_run_left_is_found_by_gc(docker_client):
    """runner killed outright (no clean-up): its network and firewall rules carry the allowlist
    mode's names and labels, so gc's egress sweep removes them (asked here for this run's session
    alone: other runs share this engine)."""
    import signal

    from executors.docker.egress import reap_orphans

    proc = subprocess.Popen(runner_cmd("exec", "-p", f"{free_port()}:8000", "--", "sleep", "100"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    (c,) = wait_for(lambda: docker_client.api.containers(filters={"label": f"runner.owner.pid={proc.pid}"}))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    session = c["Labels"]["runner.session"]
    nets, rules = _left(docker_client, proc.pid)
    assert len(nets) == 1 and rules, (nets, rules)
    docker_client.api.remove_container(c["Id"], force=True)  # (the container sweep is gc's other step)
    assert reap_orphans(docker_client, only={session}) == [(session, f"owner pid {proc.pid} is gone")]
    assert _left(docker_client, proc.pid)[0] == []
    assert f"runner-egress:{session}" not in subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
