"""The agent's direct channel on a local engine (runner/controller/channel.py): a socket of this machine,
mounted read-only into one sandbox, that only the agent ever uses and that is gone, with its
directory, once the agent connected."""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

from executors.errors import ImageNotFound
from runner import Runner
from runner.controller import channel
from runner.controller.sandbox import SandboxDied

pytestmark = pytest.mark.usefixtures("no_leaks")


def _ws(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


@pytest.fixture
def listeners(monkeypatch):
    """Every Listener made during the test, as it was made."""
    made = []
    real = channel.Listener.__init__

    def init(self, owner):
        real(self, owner)
        made.append((self, owner, os.stat(self.dir), os.stat(self.path)))

    monkeypatch.setattr(channel.Listener, "__init__", init)
    return made


def test_the_socket_is_the_sandbox_users_and_gone_once_the_agent_connected(tmp_path, listeners):
    ws = _ws(tmp_path)
    with Runner(executor="docker", workspace=ws, preset="all") as r:
        res = r.call("bash", {"command": (
            "test -e /run/runner-channel/agent.sock && echo socket-left || echo no-socket; "
            "touch /run/runner-channel/planted 2>/dev/null || echo refused; "
            "python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"/run/runner-channel/agent.sock\")' "
            "2>&1 | tail -1")})
        assert r.session._sandbox.info["channel"] == "socket"
    assert res.text.startswith("no-socket\nrefused\n"), res.text  # gone, and nothing can be left there
    assert "FileNotFoundError" in res.text, res.text  # nothing in the sandbox can connect any more
    [(listener, owner, dir_st, sock_st)] = listeners
    assert owner == (1000, 1000) and os.path.dirname(listener.dir) == channel.BASE
    base = os.lstat(channel.BASE)
    assert (base.st_uid, base.st_mode & 0o777) == (0, 0o711)  # root's, not sticky: nobody renames what is in it
    assert (dir_st.st_uid, dir_st.st_mode & 0o777) == (0, 0o711)
    assert (sock_st.st_uid, sock_st.st_mode & 0o777) == (1000, 0o600)  # no other host user connects
    assert not os.path.lexists(listener.dir)  # removed at the accept, not at the end


def test_a_first_connection_that_is_not_the_agent_is_refused_and_told_nothing(tmp_path, listeners, monkeypatch):
    """A connection from a process outside the sandbox's container (here this test, as root) is
    refused at once, before anything is read or sent on it: the intruder reads nothing."""
    ws = _ws(tmp_path)
    heard = []
    real = channel.Listener.__init__

    def init(self, owner):
        real(self, owner)
        intruder = socket.socket(socket.AF_UNIX)
        intruder.connect(self.path)  # before the agent: first in the queue
        intruder.sendall(b'{"op": "hello", "ok": true, "channel": "socket"}\n')

        def listen():
            data = b""
            try:
                while chunk := intruder.recv(65536):
                    data += chunk
            except OSError:
                pass
            heard.append(data)

        threading.Thread(target=listen, daemon=True).start()

    with Runner(executor="docker", workspace=ws, preset="all") as r:
        monkeypatch.setattr(channel.Listener, "__init__", init)
        with pytest.raises(SandboxDied, match="not this sandbox's"):
            r.session.make_sandbox().start()
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heard == [b""], heard


def test_an_agent_that_cannot_connect_answers_on_stdio_and_serves(tmp_path, monkeypatch, listeners):
    ws = _ws(tmp_path)
    monkeypatch.setattr(channel, "SANDBOX_PATH", "/run/runner-channel/elsewhere.sock")
    with Runner(executor="docker", workspace=ws, preset="all") as r:
        res = r.call("bash", {"command": "echo served"})
        info = r.session._sandbox.info
    assert info["channel"].startswith("stdio: cannot reach /run/runner-channel/elsewhere.sock"), info
    assert not res.is_error and res.text == "served\n"
    assert listeners and not any(os.path.lexists(listener.dir) for listener, *_ in listeners)


def test_a_sandbox_that_never_starts_leaves_no_socket(tmp_path, listeners):
    ws = _ws(tmp_path)
    with pytest.raises(ImageNotFound):
        with Runner(executor="docker", workspace=ws, preset="all", overrides={"sandbox.image": "runner/no-such-image"}):
            pass
    assert listeners and not any(os.path.lexists(listener.dir) for listener, *_ in listeners)


def test_an_engine_that_cannot_mount_the_directory_gets_the_same_sandbox_on_stdio(tmp_path, listeners, monkeypatch):
    """An engine that does not see this machine's /run after all (it passed the checks): the
    create names the channel's directory, the sandbox is made again on stdio, and that engine is
    offered no socket any more."""
    ws = _ws(tmp_path)
    monkeypatch.setattr(channel, "_engines", {})
    from runner.controller.sandbox import Sandbox

    real = Sandbox._spawn

    def spawn(self):
        if self._listener is not None:  # the engine will not find it: "bind source path does not exist"
            shutil.rmtree(self._listener.dir)
        real(self)

    monkeypatch.setattr(Sandbox, "_spawn", spawn)
    with Runner(executor="docker", workspace=ws, preset="all") as r:
        res = r.call("bash", {"command": "echo served"})
        info = r.session._sandbox.info
        again = r.session.placement.direct_channel(r.session.make_sandbox().executor.config)
    assert not res.is_error and res.text == "served\n"
    assert "channel" not in info and again is False


def test_the_socket_is_offered_only_where_the_engine_runs_containers_here(monkeypatch):
    monkeypatch.setattr(channel, "_engines", {})
    here = {"Name": os.uname().nodename, "KernelVersion": os.uname().release}
    assert channel.usable("", None, info=here) and channel.usable("unix:///var/run/docker.sock", "runc", info=here)
    assert not channel.usable("unix:///vm.sock", None, info={**here, "Name": "docker-desktop"})  # a VM, or another host
    assert not channel.usable("unix:///other.sock", None, info={**here, "KernelVersion": "6.6.0-linuxkit"})
    assert not channel.usable("tcp://127.0.0.1:2375", None, info=here)  # the engine's machine is not this one
    assert not channel.usable("ssh://u@h", None, info=here)
    assert not channel.usable("", "runsc", info=here)  # gVisor's gofer passes no host socket through
    channel.refuse("")
    assert not channel.usable("", None, info=here)


def test_runner_gc_removes_the_directories_of_dead_controllers(tmp_path):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    os.makedirs(channel.BASE, mode=0o711, exist_ok=True)
    gone = os.path.join(channel.BASE, f"{dead.pid}-test")
    live = os.path.join(channel.BASE, f"{os.getpid()}-test")
    for d in (gone, live):
        os.makedirs(d, exist_ok=True)
    try:
        assert (gone, f"its controller (pid {dead.pid}) is gone") in channel.sweep(dry_run=True)
        assert os.path.isdir(gone)
        assert gone in [p for p, _ in channel.sweep()] and not os.path.exists(gone)
        assert os.path.isdir(live) and live not in [p for p, _ in channel.sweep()]
    finally:
        for d in (gone, live):
            shutil.rmtree(d, ignore_errors=True)


def test_a_large_call_waits_for_a_paused_sandbox(tmp_path, docker_client):
    """A call larger than the socket's buffer, sent while the sandbox is paused (as host commands
    pause it) for longer than a receive's one-second wait, goes through once it runs again."""
    ws = _ws(tmp_path)
    with Runner(executor="docker", workspace=ws, preset="all") as r:
        r.call("bash", {"command": "true"})  # a receive waited on the socket before
        assert r.session._sandbox.info["channel"] == "socket"
        cid = r.session._sandbox.proc.container.id
        docker_client.api.pause(cid)
        later = threading.Timer(2.5, docker_client.api.unpause, args=(cid,))
        later.start()
        try:
            res = r.call("write", {"path": "big.txt", "content": "x" * (4 << 20)})
        finally:
            later.join()
    assert not res.is_error, res.text
    assert (ws / "big.txt").stat().st_size == 4 << 20
