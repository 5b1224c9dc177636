"""RemoteRunner and AsyncRemoteRunner as drop-ins for Runner, against a real `runner serve` on
loopback: reattaching to a session by id (and `runner call --server --session`), the same types
from tools(), the built-in file errors, list_files, cancelling a call from another thread, and
asyncio.gather of many calls over several async sessions."""
from __future__ import annotations

import asyncio
import json
import subprocess
import threading

import pytest

from runner import AsyncRemoteRunner, RemoteRunner, Runner
from runner.errors import RunnerError
from runner.tools.schemas.registry import ToolSpec

from ..api.test_cancel import sleeping
from .conftest import POLICY, add_tenant, runner_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

GUARDED = POLICY + "protect: [locked]\n"


@pytest.fixture
def guarded_policy(tmp_path):
    p = tmp_path / "guarded.yaml"
    p.write_text(GUARDED)
    return p


def test_reattach_by_session_id_and_runner_call_with_session(start_server, data, guarded_policy):
    key = add_tenant("again", data, guarded_policy)
    server = start_server("--data", str(data))
    first = RemoteRunner(server.url, key).start()
    try:
        first.call("bash", {"command": "echo one > kept.txt"})
        sid = first.session_id
        with RemoteRunner(server.url, key, session=sid) as again:  # the same session: its workspace
            assert again.get_file("kept.txt") == b"one\n"
            assert again.session_id == sid
            assert [t.name for t in again.tools()] == [t.name for t in first.tools()]
            again.detach()  # left open
        for n in ("two", "three"):
            out = subprocess.run(runner_argv("call", "bash", json.dumps({"command": f"echo {n} >> kept.txt"}),
                                             "--server", server.url, "--key", key, "--session", sid),
                                 capture_output=True, text=True, timeout=180)
            assert out.returncode == 0, out.stderr
        assert first.get_file("kept.txt") == b"one\ntwo\nthree\n"  # one session all along, still open
        with pytest.raises(RunnerError, match="404"):
            RemoteRunner(server.url, key, session="s-no-such").start()
        other = add_tenant("stranger", data, guarded_policy)
        with pytest.raises(RunnerError, match="404"):  # another tenant's session is not found
            RemoteRunner(server.url, other, session=sid).call("bash", {"command": "true"})
    finally:
        first.close()
    gone = subprocess.run(runner_argv("call", "bash", '{"command": "true"}', "--server", server.url, "--key", key,
                                      "--session", sid), capture_output=True, text=True, timeout=60)
    assert gone.returncode == 1 and "410" in gone.stderr


def test_tools_files_and_their_errors_are_the_local_runners(start_server, data, guarded_policy, tmp_path):
    key = add_tenant("same", data, guarded_policy)
    server = start_server("--data", str(data))
    ws = tmp_path / "ws"
    ws.mkdir()
    with RemoteRunner(server.url, key) as remote, Runner(executor="docker", workspace=ws,
                                                         policy=str(guarded_policy)) as local:
        rt, lt = remote.tools(), local.tools()
        assert rt and all(isinstance(s, ToolSpec) for s in rt) and all(isinstance(s, ToolSpec) for s in lt)
        assert [s.name for s in rt] == [s.name for s in lt]
        assert [s.schema() for s in rt] == [s.schema() for s in lt]
        assert [(s.description, s.writes, s.source) for s in rt] == [(s.description, s.writes, s.source) for s in lt]
        for r in (remote, local):
            r.put_file("d/a.bin", b"\x00\xff")
            assert r.get_file("d/a.bin") == b"\x00\xff"
            assert r.call("bash", {"command": "wc -c < d/a.bin"}).text.strip() == "2"
            r.call("bash", {"command": "mkdir -p d/sub && ln -s a.bin d/link"})
            assert r.list_files("d") == ["a.bin", "link", "sub/"]
            assert "d/" in r.list_files()
            with pytest.raises(FileNotFoundError):
                r.get_file("d/nope")
            with pytest.raises(FileNotFoundError):
                r.list_files("nope")
            with pytest.raises(IsADirectoryError):
                r.get_file("d/sub")
            with pytest.raises(NotADirectoryError):
                r.list_files("d/a.bin")
            with pytest.raises(PermissionError):
                r.put_file("locked/x.txt", b"no")
            with pytest.raises(RunnerError):  # a path the tools' rules refuse
                r.get_file("../outside")
            with pytest.raises(RunnerError):  # a link is never followed
                r.get_file("d/link")


def test_cancel_a_remote_call_from_another_thread(start_server, data, policy_file):
    token = "4311"
    key = add_tenant("stop", data, policy_file)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        ws = data / "workspaces" / "stop" / r.session_id
        r.call("bash", {"command": "true"})
        assert r.cancel() is False
        box = {}
        t = threading.Thread(target=lambda: box.update(res=r.call(
            "bash", {"command": f"touch started; sleep {token}; touch after"}, call_id="long")))
        t.start()
        wait_for(lambda: (ws / "started").exists() and sleeping(token), 60, "the sleep runs")
        assert r.cancel("other") is False
        assert r.cancel("long") is True
        assert sleeping(token) == []  # the server stopped the call before cancel returned
        t.join(60)
        assert box["res"].is_error and box["res"].meta["cancelled"] is True
        res = r.call("bash", {"command": "ps ax -o args; echo next"})  # the same session goes on
        assert not res.is_error and f"sleep {token}" not in res.text and res.text.strip().endswith("next")
        assert not (ws / "after").exists()


def test_gather_of_twenty_calls_over_five_async_remote_sessions(start_server, data, policy_file):
    key = add_tenant("many", data, policy_file)
    server = start_server("--data", str(data))

    async def main():
        runners = [AsyncRemoteRunner(server.url, key) for _ in range(5)]
        await asyncio.gather(*(r.start() for r in runners))
        try:
            results = await asyncio.gather(*(runners[i % 5].call("bash", {"command": f"echo {i} >> log; echo {i}"})
                                             for i in range(20)))
            logs = [await r.get_file("log") for r in runners]  # (a tenant's transfers at once are capped)
            streamed = runners[0].stream("bash", {"command": "echo a; sleep 0.2; echo b"})
            texts = [t async for t in streamed]
            return results, logs, texts, streamed.result, {r.session_id for r in runners}
        finally:
            await asyncio.gather(*(r.close() for r in runners))

    results, logs, texts, last, sids = asyncio.run(main())
    assert [r.text.strip() for r in results] == [str(i) for i in range(20)]
    assert len(sids) == 5
    for n, log in enumerate(logs):  # each session's calls ran in its own workspace, in order
        assert log.decode().split() == [str(i) for i in range(n, 20, 5)]
    assert "".join(texts) == "a\nb\n" and not last.is_error


REMOTE_CHILD = """
import sys
from runner import RemoteRunner
url, key, sid, token = sys.argv[1:5]
r = RemoteRunner(url, key, session=sid)
print("ready", flush=True)
try:
    r.call("bash", {"command": f"touch started; sleep {token}; touch after"})
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
r.detach()
"""


def test_ctrl_c_during_a_remote_call_stops_it_on_the_server(start_server, data, policy_file):
    import os
    import signal
    import sys

    token = "4312"
    key = add_tenant("intr", data, policy_file)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        ws = data / "workspaces" / "intr" / r.session_id
        r.call("bash", {"command": "true"})
        p = subprocess.Popen([sys.executable, "-c", REMOTE_CHILD, server.url, key, r.session_id, token],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            wait_for(lambda: (ws / "started").exists() and sleeping(token), 60, "the sleep runs")
            os.kill(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert out.strip() == "interrupted", err
        assert sleeping(token) == []  # stopped on the server before KeyboardInterrupt came
        res = r.call("bash", {"command": "ps ax -o args; echo next"})  # the session goes on
        assert f"sleep {token}" not in res.text and res.text.strip().endswith("next")
        assert not (ws / "after").exists()


def test_cancelling_an_async_remote_call_stops_it_on_the_server(start_server, data, policy_file):
    token = "4313"
    key = add_tenant("atask", data, policy_file)
    server = start_server("--data", str(data))

    async def main():
        async with AsyncRemoteRunner(server.url, key) as r:
            ws = data / "workspaces" / "atask" / r.session_id
            await r.call("bash", {"command": "true"})
            task = asyncio.ensure_future(r.call("bash", {"command": f"touch started; sleep {token}; touch after"}))
            await asyncio.to_thread(wait_for, lambda: (ws / "started").exists() and sleeping(token), 60, "the sleep")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gone = sleeping(token)  # when CancelledError came
            after = await r.call("bash", {"command": "ps ax -o args; echo next"})
            return ws, gone, after

    ws, gone, after = asyncio.run(main())
    assert gone == []
    assert f"sleep {token}" not in after.text and after.text.strip().endswith("next")
    assert not (ws / "after").exists()
