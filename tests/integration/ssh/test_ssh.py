"""The ssh executor against a real sshd on loopback: host keys, the named key only, a server
that dies mid-command, reconnecting. (Exit codes, streams, timeouts, files: the conformance
battery runs on ssh too.)"""
from __future__ import annotations

import threading
import time

import pytest

from executors.errors import EngineUnavailable, SandboxGone
from executors.models import ExecRequest
from executors.ssh import HostKeyRefused, SSHExecutor


def test_runs_commands(ssh_config):
    with SSHExecutor(ssh_config) as ex:
        res = ex.run(["sh", "-c", "echo $0 ok; exit 4"])
        assert (res.exit_code, res.stdout) == (4, b"sh ok\n")


def test_unknown_host_key_is_refused_with_its_fingerprint(ssh_config, sshd, tmp_path):
    (tmp_path / "empty_known_hosts").write_text("")
    cfg = ssh_config.model_copy(update={"known_hosts": str(tmp_path / "empty_known_hosts")})
    with pytest.raises(HostKeyRefused) as e:
        SSHExecutor(cfg).start()
    msg = str(e.value)
    host_pub = (sshd.dir / "hostkey.pub").read_text().split()
    assert "not in the known_hosts file" in msg and "SHA256:" in msg
    assert f"[127.0.0.1]:{sshd.port} {host_pub[0]} {host_pub[1]}" in msg  # the line that would trust it


def test_changed_host_key_is_refused(ssh_config, sshd, tmp_path):
    other = (sshd.dir / "other.pub").read_text().split()
    (tmp_path / "kh").write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    cfg = ssh_config.model_copy(update={"known_hosts": str(tmp_path / "kh")})
    with pytest.raises(HostKeyRefused, match="CHANGED"):
        SSHExecutor(cfg).start()


def test_missing_known_hosts_file_says_how_to_make_one(ssh_config, tmp_path):
    cfg = ssh_config.model_copy(update={"known_hosts": str(tmp_path / "nope")})
    with pytest.raises(HostKeyRefused, match="ssh-keyscan"):
        SSHExecutor(cfg).start()


def test_only_the_named_key_is_used(ssh_config, sshd, monkeypatch, tmp_path):
    """With a key the server does not accept, no agent and no ~/.ssh key is tried instead."""
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.setenv("HOME", str(sshd.dir))  # ~/.ssh would be here; it has the accepted key as id_ed25519
    (sshd.dir / ".ssh").mkdir()
    (sshd.dir / ".ssh" / "id_ed25519").write_bytes((sshd.dir / "client").read_bytes())
    cfg = ssh_config.model_copy(update={"key_file": str(sshd.dir / "other")})
    with pytest.raises(EngineUnavailable, match="authentication"):
        SSHExecutor(cfg).start()


def test_nothing_listening_fails_after_bounded_retries(ssh_config, sshd):
    sshd.stop()
    t = time.monotonic()
    with pytest.raises(EngineUnavailable, match="no SSH server answers .* after 2 attempts"):
        SSHExecutor(ssh_config).start()
    assert time.monotonic() - t < 60


def test_server_killed_mid_command_then_reconnect(ssh_config, sshd):
    with SSHExecutor(ssh_config) as ex:
        threading.Timer(1.0, sshd.stop).start()
        with pytest.raises(SandboxGone, match="lost"):
            ex.exec(ExecRequest(argv=["sleep", "30"], timeout=60))
        sshd.start()
        assert ex.run(["echo", "back"]).stdout == b"back\n"


def test_command_line_quotes_every_word(ssh_config):
    ex = SSHExecutor(ssh_config.model_copy(update={"workdir": "/tmp/a dir"}))
    line = ex.command_line(ExecRequest(argv=["git", "push; rm -rf ~", "$(id)"], env={"A": "b c"}))
    assert line == "echo $$ >&2; cd -- '/tmp/a dir' || exit 126; env -- 'A=b c' git 'push; rm -rf ~' '$(id)'; exit $?"


def test_tools_run_on_the_host_through_the_agent(ssh_config, tmp_path):
    """The same in-sandbox agent, shipped over the SSH channel and run with the remote python3."""
    from runner import Runner

    ws = tmp_path / "remote-ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    cfg = ssh_config.model_copy(update={"workdir": str(ws)})
    with Runner(executor="ssh", workspace=ws, ssh=cfg, preset="all") as r:
        assert r.call("read", {"path": "a.txt"}).text == "     1\thello"
        assert r.call("write", {"path": "b.txt", "content": "made over ssh"}).text == "wrote 13 bytes to b.txt"
        assert r.call("bash", {"command": "cat b.txt; echo; echo $SSH_CONNECTION | cut -d' ' -f3"}).text == \
            "made over ssh\n127.0.0.1\n"
        assert "protected directory" in r.call("write", {"path": ".git/hooks/x", "content": "1"}).text
    assert (ws / "b.txt").read_text() == "made over ssh"


def test_a_hung_server_cannot_hang_a_call(ssh_config, sshd):
    """The server stops answering (SIGSTOP) mid-command: the overall deadline ends the call."""
    import os
    import signal

    from .sshd import descendants

    with SSHExecutor(ssh_config.model_copy(update={"deadline": 2})) as ex:
        stopped = []

        def freeze():
            for pid in [sshd.proc.pid, *descendants(sshd.proc.pid)]:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)

        threading.Timer(0.5, freeze).start()
        try:
            res = ex.exec(ExecRequest(argv=["sleep", "30"]))
            assert res.timed_out and res.exit_code == 124
        finally:
            time.sleep(0.6)
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)


def test_what_the_host_prints_around_a_kill_is_bounded_in_size_and_time(ssh_config, sshd):
    """On the ssh executor the host is the sandbox: the agent there can write its user's shell
    start-up (~/.bashrc, which bash runs for every command sshd starts), and that prints before
    every command, the kill of a timed-out one included. The kill read all of it into the
    controller's memory for as long as it came: a start-up that prints without end held the call
    past its timeout for ever, and a flood grew the controller by its size. Here that start-up is
    the key's forced command: before the kill's command (`sh -c …`) it prints 20 MB, then a line
    every 0.2 s, for ever; every other command runs as sent."""
    import tracemalloc

    pub = (sshd.dir / "client.pub").read_text().strip()
    startup = ('case \\"$SSH_ORIGINAL_COMMAND\\" in \\"sh -c \\"*) head -c 20000000 /dev/zero; '
               'while :; do echo again; sleep 0.2; done;; esac; exec /bin/sh -c \\"$SSH_ORIGINAL_COMMAND\\"')
    (sshd.dir / "authorized_keys").write_text(f'command="{startup}" {pub}\n')
    ex = SSHExecutor(ssh_config)
    done: list = []

    def call():
        tracemalloc.start()
        try:
            done.append(ex.exec(ExecRequest(argv=["sleep", "60"], timeout=1)))
            done.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

    try:
        t0 = time.monotonic()
        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        worker.join(60)
        assert done, f"the call was still running {time.monotonic() - t0:.0f}s after its 1 s timeout"
        res, peak = done
        assert res.timed_out and res.exit_code == 124
        assert peak < 16 * 2**20, f"the controller held {peak} bytes of what the host printed"
    finally:
        ex.stop()
        sshd.stop()  # ends the start-up that prints for ever
