"""Host commands: a bash call that is exactly `git push ...` runs on the host over a real sshd,
in the mapped directory; nothing injected around it ever runs anywhere."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner import Runner
from runner.policy import load

from tests.unit.host.test_shell import DELEGATE_CHECKS

VENV_BIN = Path(sys.executable).parent  # `runner host-shell` on the host (this machine)

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def host_runner(sshd, tmp_path):
    """A docker sandbox whose `git push`/`git pull` go to the host, where a fake git records
    its argv and working directory (and exits with the code the test asks for)."""
    bin_dir = tmp_path / "hostbin"
    bin_dir.mkdir()
    log = tmp_path / "host-git.log"
    (bin_dir / "git").write_text(f"#!/bin/sh\n{DELEGATE_CHECKS}echo \"pwd=$(pwd)\" >> {log}\nfor a in \"$@\"; do echo \"arg=$a\" >> {log}; done\n"
                                 "echo pushed to host\n[ \"$2\" = warn ] && echo careful >&2\n[ \"$2\" = slow ] && sleep 30\n[ \"$2\" = fail ] && exit 5\nexit 0\n")
    (bin_dir / "git").chmod(0o755)
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # host commands run in a repository
    pol = load("default").effective(overrides={
        "host_commands": [{"name": "git", "args_prefix": ["push"]}, {"name": "git", "args_prefix": ["pull"]}],
        "host": {"host": "127.0.0.1", "port": sshd.port, "user": "root", "key_file": sshd.client_key,
                 "known_hosts": sshd.known_hosts, "env": {"PATH": f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin"}},
        "tools.allow": ["exec"]})
    with Runner(executor="docker", workspace=ws, policy=pol) as r:
        yield r, ws, log


def test_a_plain_host_command_runs_on_the_host_in_the_mapped_directory(host_runner):
    r, ws, log = host_runner
    res = r.call("bash", {"command": "git push origin 'my branch'", "cwd": "sub"})
    assert not res.is_error and res.text == "pushed to host\n" and res.meta["ran_on"] == "host"
    assert log.read_text().splitlines() == [f"pwd={ws}/sub", "arg=push", "arg=origin", "arg=my branch"]


def test_exit_code_and_timeout_follow_bash_rules(host_runner):
    r, _, _ = host_runner
    res = r.call("bash", {"command": "git push fail"})
    assert res.is_error and res.text == "pushed to host\nexit code: 5"
    res = r.call("bash", {"command": "git push slow", "timeout": 1})
    assert res.is_error and "timed out after 1s" in res.text and res.meta["exit_code"] == 124


def test_stderr_apart_on_the_host_too(host_runner):
    """bash's separate_stderr (Forgekeeper's run_bash) keeps the host command's stderr apart as
    the sandbox does; without it the two streams are one output."""
    r, _, _ = host_runner
    apart = r.call("bash", {"command": "git push warn", "separate_stderr": True})
    assert not apart.is_error and apart.text == "pushed to host\n" and apart.meta["stderr"] == "careful\n"
    assert apart.meta["ran_on"] == "host"
    one = r.call("bash", {"command": "git push warn"})
    assert "pushed to host" in one.text and "careful" in one.text and "stderr" not in one.meta


@pytest.mark.parametrize("command, says", [
    ("git push; rm -rf ~", "';'"),
    ("git push && touch /tmp/x", "'&'"),
    ("git push $(id)", "'$('"),
    ("git push `id`", "'`'"),
    ("git push\nrm -rf ~", "a newline"),
    ("git push > /tmp/out", "'>'"),
    ("git push --upload-pack=touch", "--upload-pack"),
    ("git push --receive-pack 'sh -c id'", "--receive-pack"),
    ("git fetch", "not allowed"),
])
def test_injection_never_runs(host_runner, command, says):
    r, ws, log = host_runner
    res = r.call("bash", {"command": command})
    assert res.is_error and "not run on the host" in res.text and says in res.text, res.text
    assert not log.exists()  # the host's git never ran


def test_background_and_outside_directories_are_refused(host_runner):
    r, _, log = host_runner
    assert "background mode is refused" in r.call("exec", {"command": "git push", "background": True}).text
    assert "outside the workspace" in r.call("bash", {"command": "git push", "cwd": "/tmp"}).text
    assert not log.exists()


def test_everything_else_stays_in_the_sandbox(host_runner):
    r, _, log = host_runner
    res = r.call("bash", {"command": "hostname; id -u"})
    assert not res.is_error and "ran_on" not in res.meta
    assert not log.exists()


def test_cancel_stops_a_host_command(host_runner):
    """Runner.cancel reaches a host command too: it is killed over SSH, the call answers cancelled
    (where it ran its 30 s and answered success)."""
    import threading
    import time

    r, _, log = host_runner
    box = {}
    t = threading.Thread(target=lambda: box.update(res=r.call("bash", {"command": "git push slow"}, call_id="slow")))
    t.start()
    deadline = time.monotonic() + 60
    while not (log.exists() and "arg=slow" in log.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert r.cancel("slow") is True
    t.join(60)
    assert box["res"].is_error and box["res"].meta["cancelled"] is True
    assert r.call("bash", {"command": "git push origin"}).text == "pushed to host\n"  # the next one runs
