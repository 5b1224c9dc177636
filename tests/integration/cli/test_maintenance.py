"""`runner gc`, `runner doctor`, `runner images`, and start-up without heavy imports."""
from __future__ import annotations

import subprocess
import time

import pytest

from executors.docker import DockerExecutor
from executors.docker import labels as L


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_gc_removes_orphans_and_spares_live_sandboxes(run_cli, docker_client):
    dead = DockerExecutor(labels={L.OWNER_PID: str(_dead_pid()), "runner.test": "gc"})
    expired = DockerExecutor(labels={L.EXPIRES: f"{time.time() - 5:.3f}", "runner.test": "gc"})
    alive = DockerExecutor(labels={"runner.test": "gc"})
    for ex in (dead, expired, alive):
        ex.start()
    try:
        p = run_cli("gc")
        out = p.stdout.decode()
        assert p.returncode == 0, p.stderr
        assert dead.container.short_id in out and "is gone" in out
        assert expired.container.short_id in out and "expired" in out
        assert alive.container.short_id not in out
        assert alive.is_alive() and not dead.is_alive() and not expired.is_alive()
    finally:
        for ex in (dead, expired, alive):
            ex.stop()


def test_gc_without_engine_still_removes_what_dead_controllers_left_here(run_cli, tmp_path):
    """The result stores (and agent-socket directories) are on this machine: `runner gc` removes
    them before it asks the engine, and then says the engine did not answer."""
    tmp = tmp_path / "tmp"
    store = tmp / f"runner-results-{_dead_pid()}-x"
    store.mkdir(parents=True)
    (store / "c1.out").write_text("kept output\n")
    p = run_cli("gc", env={"DOCKER_HOST": f"unix://{tmp_path}/x.sock", "TMPDIR": str(tmp)})
    assert p.returncode == 69 and "no Docker engine" in p.stderr.decode(), p.stderr
    assert f"removed {store} (results)" in p.stdout.decode()
    assert not store.exists()


@pytest.mark.docker
def test_doctor_reports_engine_and_images(run_cli):
    p = run_cli("doctor")
    out = p.stdout.decode()
    assert p.returncode == 0, out
    assert "[OK  ] engine: Docker" in out and "[OK  ] image runner/base:latest" in out and "seccomp" in out
    assert "[OK  ] sandbox runtime: crun: ran a hardened sandbox" in out, out  # (set-up registers it where it runs)


def test_doctor_without_engine_fails_with_a_fix(run_cli, tmp_path):
    p = run_cli("doctor", env={"DOCKER_HOST": f"unix://{tmp_path}/x.sock"})
    assert p.returncode == 69 and "[FAIL] engine" in p.stdout.decode() and "dockerd" in p.stdout.decode()


@pytest.mark.docker
def test_images_build_does_nothing_when_current_and_list_shows_them(run_cli):
    p = run_cli("images", "build")
    assert p.returncode == 0 and "building" not in p.stderr.decode() and "up to date" in p.stderr.decode()
    p = run_cli("images", "list")
    assert "runner/base:latest" in p.stdout.decode() and " ok " in p.stdout.decode()
    p = run_cli("images", "build", "nonsense")
    assert p.returncode == 2 and "no recipe" in p.stderr.decode()



class _Leftovers:
    """A backend config class whose collect_garbage reports what it was asked."""

    asked: list = []

    @classmethod
    def collects_garbage(cls) -> bool:
        return True

    @classmethod
    def collect_garbage(cls, host, dry_run):
        cls.asked.append((host, dry_run))
        return [("x1", "left", "its owner is gone")]


def test_gc_goes_through_every_backend_that_collects_garbage(monkeypatch):
    """runner gc asks each registered backend (BackendConfig.collect_garbage), after this
    machine's sweep: a new backend's leftovers are collected with no change to gc."""
    from executors.errors import EngineUnavailable
    from runner import backends
    from runner.cli import maintenance

    monkeypatch.setitem(backends.BACKENDS, "leftovers", "tests.integration.cli.test_maintenance:_Leftovers")
    steps = maintenance.gc_steps("unix:///nonexistent/runner-gc-test.sock")
    assert steps[0].__name__ == "sweep_local"
    answers = []
    for step in steps[1:]:
        try:
            answers.append(step(True))
        except EngineUnavailable:  # the docker and swarm backends' steps: no engine at that address
            answers.append("no engine")
    assert answers.count([("x1", "left", "its owner is gone")]) == 1 and answers.count("no engine") == 2 and _Leftovers.asked == [("unix:///nonexistent/runner-gc-test.sock", True)]
    assert {n for n in backends.names() if backends.config_class(n).collects_garbage()} == {"docker", "swarm",
                                                                                           "leftovers"}


def test_an_engine_refusal_is_one_line_and_other_errors_are_not_taken_for_one():
    """The command line's error handler asks the docker backend whether an error is the engine's
    refusal (the SDK's APIError), without importing the SDK itself."""
    import docker.errors

    from runner.backends.docker import DockerBackend

    refused = docker.errors.APIError("500 Server Error", explanation="conflict: name in use")
    assert DockerBackend.refusal(refused) == "the Docker engine refused: conflict: name in use"
    assert DockerBackend.refusal(ValueError("no")) is None
