"""`runner exec -d` and `runner ps`, `logs`, `stop`, `attach`: a detached run listed, its logs
followed, stopped, gone; its log bounded and the engine's log driver `none` for everything else."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from executors.docker import labels as L

from .conftest import runner_cmd, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def name(docker_client):
    """A name of this test's own; whatever carries it is removed afterwards."""
    n = f"runner-test-{os.getpid()}-{os.urandom(3).hex()}"
    yield n
    for c in docker_client.api.containers(all=True, filters={"name": n}):
        docker_client.api.remove_container(c["Id"], force=True)


def test_a_detached_run_listed_followed_stopped_and_gone(run_cli, docker_client, name):
    p = run_cli("exec", "-d", "--name", name, "--", "sh", "-c",
                "trap 'echo stopping; exit 0' TERM; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2; done")
    assert p.returncode == 0, p.stderr
    cid = p.stdout.decode().strip()
    info = docker_client.api.inspect_container(cid)
    assert info["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}}
    assert info["HostConfig"]["ReadonlyRootfs"] and info["HostConfig"]["CapDrop"] == ["ALL"]  # hardened as ever
    assert info["Config"]["Labels"][L.ROLE] == "detached" and L.orphan_reason(info["Config"]["Labels"]) is None
    ps = run_cli("ps")
    assert name in ps.stdout.decode() and cid[:12] in ps.stdout.decode()
    follow = subprocess.Popen(runner_cmd("logs", "-f", name), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = [follow.stdout.readline() for _ in range(3)]
        assert seen[:1] == [b"line 0\n"] and seen[2] == b"line 2\n", seen
        stop = run_cli("stop", "-t", "5", name)
        assert stop.returncode == 0 and stop.stdout.decode().strip() == name, stop.stderr
        rest, _ = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert rest.endswith(b"stopping\n") and follow.returncode == 0  # followed to the end
    assert docker_client.api.containers(all=True, filters={"name": name}) == []
    assert name not in run_cli("ps", "-a").stdout.decode()


def test_rm_removes_a_detached_run_when_it_ends(run_cli, docker_client, name):
    p = run_cli("exec", "-d", "--rm", "--name", name, "--", "true")
    assert p.returncode == 0, p.stderr
    wait_for(lambda: docker_client.api.containers(all=True, filters={"name": name}) == [])


def test_without_rm_an_ended_run_stays_until_stopped(run_cli, docker_client, name):
    p = run_cli("exec", "-d", "--name", name, "--", "sh", "-c", "echo done; exit 3")
    assert p.returncode == 0, p.stderr
    wait_for(lambda: "Exited (3)" in run_cli("ps", "-a").stdout.decode())
    assert run_cli("logs", name).stdout == b"done\n"
    assert run_cli("stop", name).returncode == 0
    assert docker_client.api.containers(all=True, filters={"name": name}) == []


def test_attach_shows_the_output_and_gives_the_status(run_cli, docker_client, name):
    p = run_cli("exec", "-d", "--name", name, "--", "sh", "-c",
                "while [ ! -e /tmp/go ]; do echo waiting; sleep 0.2; done; echo bye; exit 4")
    assert p.returncode == 0, p.stderr
    att = subprocess.Popen(runner_cmd("attach", name), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        assert att.stdout.readline() == b"waiting\n"  # attached
        docker_client.api.exec_start(docker_client.api.exec_create(name, ["touch", "/tmp/go"]))
        out, err = att.communicate(timeout=60)
    finally:
        att.kill()
    assert att.returncode == 4 and out.endswith(b"bye\n"), err
    assert run_cli("stop", name).returncode == 0


def test_other_containers_are_left_alone(run_cli, docker_client, name):
    c = docker_client.api.create_container("runner/base:latest", ["true"], name=name, labels={"runner.test": "other"})
    for args in (["logs", name], ["stop", name], ["attach", name]):
        p = run_cli(*args)
        assert p.returncode == 125 and b"no detached run of runner" in p.stderr, (args, p.stderr)
    assert docker_client.api.inspect_container(c["Id"])  # still there


@pytest.mark.parametrize("ref", ["../../info", "x/../y", ""])
def test_a_run_is_named_by_a_name_or_id_only(run_cli, ref):
    p = run_cli("logs", ref)
    assert p.returncode == 125 and b"no detached run" in p.stderr, p.stderr


@pytest.mark.parametrize("args, says", [
    (["-d", "--timeout", "5"], "-d with --timeout"),
    (["-d", "-p", "1234:80"], "-d with -p needs --network bridge"),
    (["-d", "--name", "bad name"], "bad --name"),
    (["--name", "x"], "for detached runs"),
])
def test_what_a_detached_run_cannot_do_is_refused(run_cli, args, says):
    p = run_cli("exec", *args, "--", "true")
    assert p.returncode == 125 and says in p.stderr.decode(), p.stderr


def test_a_foreground_run_still_logs_nothing(docker_client):
    proc = subprocess.Popen(runner_cmd("exec", "--", "sleep", "60"), stdin=subprocess.DEVNULL)
    try:
        found = wait_for(lambda: docker_client.api.containers(filters={"label": f"runner.owner.pid={proc.pid}"}))
        assert docker_client.api.inspect_container(found[0]["Id"])["HostConfig"]["LogConfig"]["Type"] == "none"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_gc_judges_a_detached_run_by_its_expiry():
    labels = L.make_labels("s", 60, role="detached")
    labels[L.OWNER_PID] = "999999999"  # its owner has left
    assert L.orphan_reason(labels) is None
    assert L.orphan_reason(labels, now=time.time() + 120) == "expired"
    labels[L.ROLE] = "call"
    assert L.orphan_reason(labels) is not None  # any other container: its owner gone, an orphan
