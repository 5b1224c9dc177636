"""The SSH host failing under a Runner: sshd killed mid-command (then started again), and the
link to the host taken down (a veth into a network namespace this test made, sshd inside it).
Each ends the call with a clear error saying the SSH connection was lost, and the next call
reconnects."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

from executors.ssh import SSHConfig
from runner import Runner
from runner.core import CALL_GRACE

from ..ssh.sshd import SSHD, Sshd, make_sshd

TIMEOUT = 120  # the in-flight call's own timeout


class NetnsSshd(Sshd):
    """sshd in a network namespace of its own, reached over a veth pair: the host side can be
    taken down like a pulled cable (no FIN, no RST: the peer just stops answering)."""

    def __init__(self, dir, port, ns: str, host_if: str, addr: str) -> None:
        super().__init__(dir, port)
        self.ns, self.host_if, self.addr = ns, host_if, addr

    def start(self) -> "NetnsSshd":
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, SSHD, "-D", "-e", "-f",
                                      str(self.dir / "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "sshd.log", "ab"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.addr, self.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.dir / 'sshd.log').read_text()[-2000:]}")

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "up" if up else "down"], check=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def netns_sshd(tmp_path):
    tag = str(os.getpid())  # the owner's pid: tests/leftovers.py removes them if it was killed
    ns, host_if, peer_if = f"runner-faults-test-{tag}", f"rft{tag}h", f"rft{tag}n"
    net = f"10.253.{os.getpid() % 256}"
    _ip("netns", "add", ns)
    server = None
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _ip("link", "set", peer_if, "netns", ns)
        _ip("addr", "add", f"{net}.1/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", peer_if)
        _ip("-n", ns, "link", "set", peer_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        base = make_sshd(tmp_path / "sshd")
        conf = (base.dir / "sshd_config").read_text().replace("ListenAddress 127.0.0.1", f"ListenAddress {net}.2")
        (base.dir / "sshd_config").write_text(conf)
        hosts = (base.dir / "known_hosts").read_text().replace("[127.0.0.1]", f"[{net}.2]")
        (base.dir / "known_hosts").write_text(hosts)
        server = NetnsSshd(base.dir, base.port, ns, host_if, f"{net}.2").start()
        yield server
    finally:
        if server is not None:
            server.stop()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def loop_sshd(tmp_path):
    server = make_sshd(tmp_path / "sshd").start()
    yield server
    server.stop()


def _runner(server, addr: str, ws) -> Runner:
    cfg = SSHConfig(host=addr, port=server.port, user="root", key_file=server.client_key,
                    known_hosts=server.known_hosts, connect_attempts=2, keepalive=1, dead_after=3,
                    workdir=str(ws))
    return Runner(executor="ssh", workspace=ws, ssh=cfg)


def _break_mid_call(r: Runner, ws, breaking) -> object:
    out: dict = {}
    marker = ws / "started"

    def go():
        out["result"] = r.call("bash", {"command": f"touch {marker.name}; exec sleep 600", "timeout": TIMEOUT})

    t = threading.Thread(target=go)
    t.start()
    while not marker.exists():
        assert t.is_alive(), out
        t.join(0.05)
    marker.unlink()
    breaking()
    t.join(TIMEOUT + CALL_GRACE)  # the Runner's own bound on a call
    assert not t.is_alive(), "the call did not return within its timeout"
    return out["result"]


def _lost(res) -> None:
    assert res.is_error
    assert "SSH connection" in res.text and "was lost" in res.text, res.text
    assert "fresh sandbox will serve the next call" in res.text, res.text


def test_sshd_killed_mid_command_then_restarted(loop_sshd, workspace):
    with _runner(loop_sshd, "127.0.0.1", workspace) as r:
        assert r.call("bash", {"command": "echo up"}).text == "up\n"
        _lost(_break_mid_call(r, workspace, loop_sshd.stop))
        loop_sshd.start()
        again = r.call("bash", {"command": "echo back"})
        assert again.text == "back\n", again.text


def test_link_to_the_host_taken_down_mid_command(netns_sshd, workspace):
    with _runner(netns_sshd, netns_sshd.addr, workspace) as r:
        assert r.call("bash", {"command": "echo up"}).text == "up\n"
        _lost(_break_mid_call(r, workspace, lambda: netns_sshd.link(False)))
        netns_sshd.link(True)
        again = r.call("bash", {"command": "echo back"})
        assert again.text == "back\n", again.text
