"""The SSH host failing under a Runner: sshd killed mid-command (then started again), and the
link to the host taken down (a veth into a network namespace this test made, sshd inside it).
Each ends the call with a clear error saying the SSH connection was lost, and the next call
reconnects."""
from __future__ import annotations

import os
import subprocess

import pytest

from executors.ssh import SSHConfig
from runner import Runner

from ..ssh.sshd import Sshd, make_sshd
from .midcall import break_mid_call



class NetnsSshd(Sshd):
    """sshd in a network namespace of its own, reached over a veth pair: the host side can be
    taken down like a pulled cable (no FIN, no RST: the peer just stops answering)."""

    def __init__(self, dir, port, ns: str, host_if: str, addr: str) -> None:
        super().__init__(dir, port)
        self.ns, self.host_if, self.addr = ns, host_if, addr

    @property
    def host(self) -> str:
        return self.addr

    def argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *super().argv()]

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


def _lost(res) -> None:
    assert res.is_error
    assert "SSH connection" in res.text and "was lost" in res.text, res.text
    assert "fresh sandbox will serve the next call" in res.text, res.text


def test_sshd_killed_mid_command_then_restarted(loop_sshd, workspace):
    with _runner(loop_sshd, "127.0.0.1", workspace) as r:
        assert r.call("bash", {"command": "echo up"}).text == "up\n"
        _lost(break_mid_call(r, workspace, loop_sshd.stop))
        loop_sshd.start()
        again = r.call("bash", {"command": "echo back"})
        assert again.text == "back\n", again.text


def test_link_to_the_host_taken_down_mid_command(netns_sshd, workspace):
    with _runner(netns_sshd, netns_sshd.addr, workspace) as r:
        assert r.call("bash", {"command": "echo up"}).text == "up\n"
        _lost(break_mid_call(r, workspace, lambda: netns_sshd.link(False)))
        netns_sshd.link(True)
        again = r.call("bash", {"command": "echo back"})
        assert again.text == "back\n", again.text
