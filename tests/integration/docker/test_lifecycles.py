"""Sandbox lifecycles and the warm pool, against the real engine."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from runner import Runner

pytestmark = pytest.mark.usefixtures("no_leaks")


def hostname(r) -> str:
    return r.call("bash", {"command": "hostname"}).text.strip()


def test_per_session_keeps_one_sandbox(tmp_path):
    with Runner(executor="docker", workspace=tmp_path) as r:
        first = hostname(r)
        r.call("bash", {"command": "echo kept > /tmp/state"})
        assert hostname(r) == first
        assert r.call("bash", {"command": "cat /tmp/state"}).text.strip() == "kept"


def test_per_call_gives_every_call_a_fresh_sandbox_from_the_pool(tmp_path, docker_client):
    with Runner(executor="docker", workspace=tmp_path, lifecycle="per-call", pool_size=2) as r:
        names = [hostname(r) for _ in range(4)]
        assert len(set(names)) == 4  # never reused
        r.call("bash", {"command": "echo gone > /tmp/state; echo kept > state.txt"})
        assert "No such file" in r.call("bash", {"command": "cat /tmp/state"}).text
        assert r.call("read", {"path": "state.txt"}).text.endswith("kept")
        deadline = time.monotonic() + 60
        while r.session._pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.session._pool.ready == 2
        mine = docker_client.api.containers(filters={"label": f"runner.session={r.session_id}"})
        assert len(mine) == 2  # the two warm, never-used ones, and nothing else


def test_the_pool_is_emptied_when_its_owner_exits(tmp_path, docker_client):
    script = (f"import time, sys\nfrom runner import Runner\n"
              f"r = Runner(executor='docker', workspace={str(tmp_path)!r}, lifecycle='per-call', pool_size=2).start()\n"
              "while r.session._pool.ready < 2: time.sleep(0.05)\nprint('ready', flush=True)\n")  # exits without close()
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "ready", p.stderr
    # Had the pool not been emptied at exit, its containers would now be orphans (owner gone).
    from executors.docker.labels import OWNER_PARENT, orphan_reason

    orphans = [c for c in docker_client.api.containers(all=True, filters={"label": "runner.managed=true"})
               if orphan_reason(c["Labels"]) and c["Labels"].get(OWNER_PARENT) == str(os.getpid())]
    assert orphans == []  # of the script's containers (its parent is this process): others' are not ours


def test_a_forked_child_that_exits_leaves_its_parents_pool(tmp_path, docker_client):
    """A child forked without exec (multiprocessing's fork, a library's) runs the exit hooks it
    inherited when it exits normally: the parent's warm sandboxes must survive that."""
    script = (f"import os, sys, time\nfrom runner import Runner\n"
              f"r = Runner(executor='docker', workspace={str(tmp_path)!r}, lifecycle='per-call', pool_size=2).start()\n"
              "while r.session._pool.ready < 2: time.sleep(0.05)\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    sys.exit(0)\n"
              "os.waitpid(pid, 0)\n"
              "print(r.session._pool.ready, all(sb.alive for sb in list(r.session._pool._ready.queue)), flush=True)\n"
              "print(r.call('bash', {'command': 'echo ok'}).text, flush=True)\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.stdout.split("\n")[:2] == ["2 True", "ok"], p.stdout + p.stderr
    from executors.docker.labels import OWNER_PARENT, orphan_reason

    orphans = [c for c in docker_client.api.containers(all=True, filters={"label": "runner.managed=true"})
               if orphan_reason(c["Labels"]) and c["Labels"].get(OWNER_PARENT) == str(os.getpid())]
    assert orphans == []  # of the script's containers (its parent is this process): others' are not ours


def test_files_belong_to_the_workspace_owner(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    with Runner(executor="docker", workspace=ws) as r:
        assert r.call("bash", {"command": "id -u; touch made-by-bash; mkdir d"}).text.strip() == "1000"
        r.call("write", {"path": "made-by-write", "content": "x"})
    for name in ("made-by-bash", "d", "made-by-write"):
        st = (ws / name).stat()
        assert (st.st_uid, st.st_gid) == (1000, 1000), name


def test_a_closed_runner_refuses_and_close_is_idempotent(tmp_path):
    r = Runner(executor="local", workspace=tmp_path).start()
    r.close()
    r.close()
    from runner.errors import RunnerError

    with pytest.raises(RunnerError):
        r.call("ls", {})


def _spares(agent_pid: int) -> int:
    """Shells the agent keeps ready: its zygote and the zygote's fork waiting for a command
    (agent/zygote.py), the agent's descendants running its script."""
    parent, script = {}, set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            parent[int(d)] = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            if b"__runner_cmd" in open(f"/proc/{d}/cmdline", "rb").read():
                script.add(int(d))
        except OSError:
            continue

    def under_agent(pid: int) -> bool:
        while pid in parent and pid > 1:
            pid = parent[pid]
            if pid == agent_pid:
                return True
        return False

    return sum(1 for pid in script if under_agent(pid))


@pytest.mark.parametrize("lifecycle, spares_after", [("per-session", 2), ("per-call", 0)])
def test_a_per_call_sandbox_keeps_no_shell_for_a_call_that_never_comes(tmp_path, lifecycle, spares_after):
    """A per-call sandbox serves one call: it starts no shell after that call's result and loads
    only the shell tools ahead (every other module when its call comes), so a sandbox costs less
    CPU; a per-session one keeps a shell ready for its next call."""
    (tmp_path / "a.txt").write_text("line\n")
    with Runner(executor="local", workspace=tmp_path, lifecycle=lifecycle, pool_size=0) as r:
        sb = r.session.make_sandbox().start()
        try:
            res = sb.call("c1", "bash", {"command": "true"}, timeout=30)
            assert not res["is_error"], res
            time.sleep(0.5)  # a spare wanted after the result has started by now
            assert _spares(sb.info["pid"]) == spares_after
            read = sb.call("c2", "read", {"path": "a.txt"}, timeout=30)  # a module not loaded ahead
            assert not read["is_error"] and "line" in str(read["content"]), read
        finally:
            sb.close()


@pytest.mark.parametrize("lifecycle", ["per-session", "per-call"])
def test_a_process_that_exits_right_after_close_leaves_no_container(tmp_path, docker_client, lifecycle):
    """close() answers before the containers are removed (runner/controller/finisher.py); the process still
    removes them before it exits, even when it exits at once (the finisher's thread is no daemon,
    and what it is given to do is done). Also the warm pool's and those closed with wait=False."""
    script = ("import sys\nfrom runner import Runner\n"
              f"r = Runner(executor='docker', workspace={str(tmp_path)!r}, lifecycle={lifecycle!r}, pool_size=2)\n"
              "r.start()\nprint(r.session_id, r.call('bash', {'command': 'echo hi'}).text.strip(), flush=True)\n"
              "r.close()\n")  # then exits at once
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    sid, said = p.stdout.split()
    assert (said, p.returncode) == ("hi", 0), p.stderr
    assert docker_client.api.containers(all=True, filters={"label": f"runner.session={sid}"}) == []
