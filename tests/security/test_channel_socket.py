"""The agent's direct channel on a local engine (runner/channel.py): a socket of this machine,
mounted read-only into one sandbox, that only the agent ever uses and that is gone, with its
directory, once the agent connected."""
from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from executors.errors import ImageNotFound
from runner import Runner, channel
from runner.sandbox import SandboxDied

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
            "ls -A /run/runner-channel; echo listed; touch /run/runner-channel/planted 2>/dev/null || echo refused; "
            "python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"/run/runner-channel/agent.sock\")' "
            "2>&1 | tail -1")})
        assert r.session._sandbox.info["channel"] == "socket"
    assert res.text.startswith("listed\nrefused\n"), res.text  # empty, and nothing can be left there
    assert "FileNotFoundError" in res.text, res.text  # nothing in the sandbox can connect any more
    [(listener, owner, dir_st, sock_st)] = listeners
    assert owner == (1000, 1000)
    assert (dir_st.st_uid, dir_st.st_mode & 0o777) == (1000, 0o700)  # no other host user reaches it
    assert (sock_st.st_uid, sock_st.st_mode & 0o777) == (1000, 0o600)
    assert not os.path.lexists(listener.dir)  # removed at the accept, not at the end


def test_a_first_connection_that_is_not_the_agent_is_refused_and_told_nothing(tmp_path, listeners, monkeypatch):
    """Whatever connects first must answer the hello with the agent's key before the controller
    sends it anything: a forged answer ends the sandbox, and the intruder read nothing."""
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
        with pytest.raises(SandboxDied, match="tampered"):
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


def test_the_socket_is_offered_only_where_the_sandbox_shares_this_kernel():
    me = (os.geteuid(), os.getegid())
    assert channel.usable("", None, me) and channel.usable("unix:///var/run/docker.sock", "runc", me)
    assert not channel.usable("tcp://127.0.0.1:2375", None, me)  # the engine's machine is not this one
    assert not channel.usable("ssh://u@h", None, me)
    assert not channel.usable("", "runsc", me)  # gVisor's gofer passes no host socket through
