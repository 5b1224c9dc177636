"""Cancelling a call of the Python API against the real engine: from another thread (cancel,
close), and Ctrl-C in the main thread of a real process. Each time the call's processes are gone
(looked for on this machine, where the engine's containers run their processes, and in the
sandbox), and the same Runner serves the next call."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runner import Runner

pytestmark = pytest.mark.usefixtures("no_leaks")


def sleeping(token: str) -> list[int]:
    """Pids on this machine running `sleep <token>` (a container's processes are seen here)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", token.encode()]:
                found.append(int(d.name))
    return found


def wait_for(pred, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not pred():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def command(ws: Path, token: str) -> str:
    return f"touch started; sleep {token}; echo never > after"


def after_cancel(r: Runner, ws: Path, token: str) -> None:
    """The call's processes are gone and the Runner serves the next call."""
    assert sleeping(token) == []
    res = r.call("bash", {"command": "ps ax -o args"})
    assert not res.is_error, res.text
    assert f"sleep {token}" not in res.text
    assert r.call("bash", {"command": "echo next"}).text.strip() == "next"
    assert not (ws / "after").exists()


@pytest.mark.parametrize("executor", ["docker", "local"])
def test_cancel_from_another_thread_stops_the_call_and_its_processes(tmp_path, executor):
    """local: the agent runs each call's shell in a session of its own, which killing the agent's
    process group did not reach (the sleep ran on)."""
    token = "4301" if executor == "docker" else "4304"
    with Runner(executor=executor, workspace=tmp_path) as r:
        r.call("bash", {"command": "true"})
        assert r.cancel() is False  # no call under way
        box = {}
        t = threading.Thread(target=lambda: box.update(res=r.call("bash", {"command": command(tmp_path, token)},
                                                                  call_id="long")))
        t.start()
        wait_for(lambda: (tmp_path / "started").exists() and sleeping(token))
        assert r.cancel("another") is False  # not the call under way: nothing happens
        assert sleeping(token)
        assert r.cancel("long") is True
        assert sleeping(token) == []  # gone when cancel returns
        t.join(60)
        res = box["res"]
        assert res.is_error and res.meta["cancelled"] is True and res.meta["error_type"] == "execution"
        assert res.meta["call_id"] == "long"
        after_cancel(r, tmp_path, token)


def test_close_from_another_thread_ends_the_running_call_at_once(tmp_path):
    token = "4302"
    r = Runner(executor="docker", workspace=tmp_path).start()
    box = {}
    t = threading.Thread(target=lambda: box.update(res=r.call("bash", {"command": command(tmp_path, token)})))
    t.start()
    wait_for(lambda: (tmp_path / "started").exists() and sleeping(token))
    r.close()  # did not wait for the sleep: the call ended under it
    t.join(60)
    assert not t.is_alive()
    assert box["res"].meta.get("cancelled") is True
    assert sleeping(token) == []


CHILD = """
import sys, time
from runner import Runner
ws, token = sys.argv[1], sys.argv[2]
with Runner(executor="docker", workspace=ws) as r:
    r.call("bash", {"command": "true"})
    print("ready", flush=True)
    try:
        r.call("bash", {"command": f"touch started; sleep {token}; echo never > after"})
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.time(), flush=True)
        sys.stdin.readline()  # the test looks for the sleep meanwhile
    ps = r.call("bash", {"command": "ps ax -o args"})
    print("ps", ps.is_error, f"sleep {token}" in ps.text, flush=True)
    print("next", r.call("bash", {"command": "echo next"}).text.strip(), flush=True)
"""


def test_ctrl_c_in_the_main_thread_stops_the_call_then_raises_keyboard_interrupt(tmp_path):
    token = "4303"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), token], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        wait_for(lambda: (tmp_path / "started").exists() and sleeping(token))
        os.kill(p.pid, signal.SIGINT)
        line = p.stdout.readline().split()
        assert line[:1] == ["interrupted"], (line, p.stderr.read() if p.poll() is not None else "")
        assert sleeping(token) == []  # gone before KeyboardInterrupt was raised
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out.splitlines() == ["ps False False", "next next"], err
    assert p.returncode == 0, err
    assert not (tmp_path / "after").exists()
