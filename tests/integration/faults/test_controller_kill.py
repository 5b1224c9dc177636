"""The controller SIGKILLed mid-call, with a warm pool and an allowlist-mode session: afterwards
`runner gc` removes every container, network, egress proxy, firewall rule and result store it left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executors.docker.egress import COMMENT_PREFIX, network_names

from ...leftovers import result_stores

pytestmark = pytest.mark.docker

RUNNER = str(Path(sys.executable).with_name("runner"))

# Two Runners in one controller: per-call with a warm pool of 2 in allowlist mode (its own
# networks, egress proxy and firewall rules), and a per-session one; each has a call running.
CONTROLLER = textwrap.dedent("""
    import os, sys, threading, time
    from runner import Runner
    ws = sys.argv[1]
    pooled = Runner(workspace=ws, lifecycle="per-call", pool_size=2,
                    overrides={"network.mode": "allowlist", "network.allow": ["198.51.100.1:443"]}).start()
    session = Runner(workspace=ws, lifecycle="per-session").start()
    print(pooled.session_id, session.session_id, flush=True)
    assert session.call("bash", {"command": "seq 1000"}).meta["truncated"]  # kept whole in its result store
    for r, mark in ((session, "s"), (pooled, "p")):
        threading.Thread(target=r.call, args=("bash", {"command": f"touch {mark}.started; exec sleep 600"})).start()
    # Killed only once nothing is on its way to the engine: both calls run, the pool is full again.
    while not (os.path.exists(os.path.join(ws, "s.started")) and os.path.exists(os.path.join(ws, "p.started"))
               and pooled.session._pool.ready == 2):
        time.sleep(0.05)
    print("calls running", flush=True)
    time.sleep(3600)
""")


def _rules(session: str) -> list[str]:
    out = []
    for tool in ("iptables", "ip6tables"):
        r = subprocess.run([tool, "-w", "10", "-S"], capture_output=True, text=True)
        out += [line for line in r.stdout.splitlines() if f"{COMMENT_PREFIX}{session}" in line]
    return out


def _left(docker_client, sessions) -> dict:
    return {
        "containers": [c["Id"][:12] for s in sessions
                       for c in docker_client.api.containers(all=True, filters={"label": f"runner.session={s}"})],
        "networks": [n.name for s in sessions for n in docker_client.networks.list(names=list(network_names(s)))],
        "rules": [r for s in sessions for r in _rules(s)],
    }


def test_controller_sigkilled_mid_call_then_gc_removes_everything(docker_client, workspace):
    p = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(workspace)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    sessions = []
    try:
        sessions = p.stdout.readline().split()
        assert len(sessions) == 2, "the controller did not start"
        assert p.stdout.readline() == "calls running\n"
        p.send_signal(signal.SIGKILL)
        assert p.wait() == -signal.SIGKILL
        left = _left(docker_client, sessions)
        # what the kill left: 2 sandboxes in calls, 2 warm ones, the proxy; 2 networks; the rules
        assert len(left["containers"]) == 5 and len(left["networks"]) == 2 and left["rules"], left
        stores = result_stores(p.pid)
        assert len(stores) == 1, stores  # the session's result store, with the call's whole output
        gc = subprocess.run([RUNNER, "gc"], capture_output=True, text=True, timeout=300)
        assert gc.returncode == 0, gc.stderr
        assert _left(docker_client, sessions) == {"containers": [], "networks": [], "rules": []}, gc.stdout
        assert result_stores(p.pid) == [], gc.stdout
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if sessions and any(_left(docker_client, sessions).values()):
            subprocess.run([RUNNER, "gc"], capture_output=True)
