"""dockerd stopped, then started again, in the middle of a call (issue 15).

The in-flight call ends with a clear error within its timeout; once the engine is back the next
call works in a fresh sandbox; and the dead sandbox is removed by the Runner itself (not left as
an exited container for `runner gc`)."""
from __future__ import annotations

import threading

import pytest

from runner import Runner

from .midcall import TIMEOUT, break_mid_call

pytestmark = pytest.mark.docker

def _sandboxes(engine, session: str) -> set[str]:
    return set(engine.containers(f"runner.session={session}"))


def _stop_mid_call(engine, r: Runner, ws) -> tuple[object, set[str]]:
    """Stop dockerd while a long call runs; the call's result and the containers before the stop."""
    before: set[str] = set()
    res = break_mid_call(r, ws, lambda: (before.update(_sandboxes(engine, r.session_id)), engine.stop()))
    return res, before


@pytest.mark.parametrize("lifecycle", ["per-session", "per-call"])
def test_engine_stopped_mid_call_then_restarted(private_engine, workspace, lifecycle):
    engine = private_engine
    with Runner(workspace=workspace, lifecycle=lifecycle) as r:
        assert r.call("bash", {"command": "echo warm"}).content.strip() == "warm"
        res, before = _stop_mid_call(engine, r, workspace)
        assert res.is_error
        assert "docker engine stopped answering" in res.text.lower(), res.text
        assert "fresh sandbox will serve the next call" in res.text, res.text
        engine.start()
        again = r.call("bash", {"command": "echo back; hostname"})
        assert not again.is_error, again.text
        assert again.text.splitlines()[0] == "back"
        host = again.text.splitlines()[1]
        assert not any(cid.startswith(host) for cid in before), "the next call ran in an old sandbox"
    from runner.controller import finisher

    finisher.wait(timeout=120)  # (close() leaves the removal to run after its answer)
    left = _sandboxes(engine, r.session_id)
    assert not left, f"the Runner left {len(left)} sandbox container(s) after close(): {engine.docker('ps', '-a')}"


@pytest.mark.parametrize("lifecycle", ["per-session", "per-call"])
def test_dead_sandbox_removed_by_close_alone(private_engine, workspace, lifecycle):
    """No call after the engine is back: close() itself removes the sandbox that died with it."""
    engine = private_engine
    with Runner(workspace=workspace, lifecycle=lifecycle, pool_size=0) as r:
        res, before = _stop_mid_call(engine, r, workspace)
        assert res.is_error and before
        engine.start()
        assert _sandboxes(engine, r.session_id) >= before  # the dead one is still there (exited)
    from runner.controller import finisher

    finisher.wait(timeout=120)  # (close() leaves the removal to run after its answer)
    left = _sandboxes(engine, r.session_id)
    assert not left, f"the Runner left {len(left)} sandbox container(s) after close(): {engine.docker('ps', '-a')}"


def test_executor_session_engine_stopped_mid_exec(private_engine):
    """The executor API on its own (a per-session DockerExecutor, commands by `docker exec`): the
    command in flight raises SandboxGone saying the engine stopped; stop() once the engine is back
    removes the dead container."""
    from executors import ExecRequest
    from executors.docker import DockerExecutor
    from executors.errors import SandboxGone

    engine = private_engine
    ex = DockerExecutor(image="runner/base:latest", lifecycle="per-session")
    ex.start()
    started = threading.Event()
    out: dict = {}

    def go():
        try:
            out["result"] = ex.exec(ExecRequest(argv=["sh", "-c", "echo started; exec sleep 600"], timeout=TIMEOUT),
                                    on_output=lambda stream, data: started.set())
        except Exception as e:
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    try:
        while not started.is_set():
            assert t.is_alive(), out
            started.wait(0.05)
        engine.stop()
        t.join(TIMEOUT)
        assert not t.is_alive(), "the exec did not return within its timeout after the engine stopped"
        assert isinstance(out.get("error"), SandboxGone), out
        assert "docker engine stopped answering" in str(out["error"]).lower(), out
        engine.start()
    finally:
        ex.stop()
    assert not engine.containers(f"runner.executor={ex.instance}")
