"""A test run killed mid-way (the CI failure of 2026-11-23: the main engine was left manager of a
swarm advertised on a veth the killed run had made, and the next run's worker could not join:
"network is unreachable") leaves nothing that breaks the next one: tests/leftovers.py removes
what belongs to dead owners, and nothing of a live one."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ...leftovers import sweep, sweep_images, sweep_swarm
from .privengine import PrivateEngine


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _dead_pid() -> int:
    """The pid of a process that has exited: the owner of a killed run."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _namespace_with_veth(pid: int, net: str) -> tuple[str, str]:
    ns, host_if = f"runner-faults-test-{pid}", f"rft{pid}h"
    _ip("netns", "add", ns)
    _ip("link", "add", host_if, "type", "veth", "peer", "name", f"rft{pid}n")
    _ip("link", "set", f"rft{pid}n", "netns", ns)
    _ip("addr", "add", f"{net}.1/30", "dev", host_if)
    return ns, host_if


def _cleanup(ns: str, host_if: str) -> None:
    subprocess.run(["ip", "link", "del", host_if], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_dead_runs_namespaces_links_processes_and_dirs_are_removed():
    dead = _dead_pid()
    ns, host_if = _namespace_with_veth(dead, "10.253.250")
    d = Path(f"/tmp/runner-faults-test-{dead}-killed")
    (d / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(d / "mnt")], check=True)
    # a daemon the killed run started in its namespace, in a session of its own: it outlived it
    daemon = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"], start_new_session=True)
    try:
        inside = os.stat(f"/var/run/netns/{ns}").st_ino
        while os.stat(f"/proc/{daemon.pid}/ns/net").st_ino != inside:  # `ip` enters it, then execs
            assert daemon.poll() is None
            time.sleep(0.01)
        removed = sweep(engine=False)
        assert f"netns {ns}" in removed and f"dir {d}" in removed, removed
        assert not os.path.exists(f"/var/run/netns/{ns}")
        assert not Path(f"/sys/class/net/{host_if}").exists()
        assert not d.exists()
        assert daemon.wait(timeout=30) == -9
    finally:
        daemon.kill()
        subprocess.run(["umount", "-l", str(d / "mnt")], capture_output=True)
        subprocess.run(["rm", "-rf", str(d)])
        _cleanup(ns, host_if)


def test_a_live_runs_leftovers_are_not_touched():
    me = os.getpid()  # this pytest is alive: what carries its pid is in use
    ns, host_if = _namespace_with_veth(me, "10.253.251")
    d = Path(f"/tmp/runner-faults-test-{me}-alive")
    d.mkdir()
    try:
        removed = sweep(engine=False)
        assert not any(str(me) in r for r in removed), removed
        assert os.path.exists(f"/var/run/netns/{ns}") and Path(f"/sys/class/net/{host_if}").exists() and d.exists()
    finally:
        d.rmdir()
        _cleanup(ns, host_if)


@pytest.mark.docker
def test_a_swarm_advertised_on_a_vanished_test_address_is_left(monkeypatch):
    """The CI failure itself, on a private engine: a swarm made by a killed run, advertised on an
    address of a veth that is gone, is left; one whose address is still up is not."""
    eng = PrivateEngine().start()
    dead = _dead_pid()
    ns, host_if = _namespace_with_veth(dead, "10.254.251")
    try:
        _ip("link", "set", host_if, "up")
        monkeypatch.setenv("DOCKER_HOST", eng.url)
        eng.docker("swarm", "init", "--advertise-addr", "10.254.251.1", "--listen-addr", "10.254.251.1:2377")
        assert sweep_swarm() == []  # its address is up: a live run's swarm
        assert json.loads(eng.docker("info", "--format", "{{json .Swarm}}"))["LocalNodeState"] == "active"
        _cleanup(ns, host_if)  # the killed run's veth goes; its swarm stays, unusable
        assert sweep_swarm() == ["swarm advertised on 10.254.251.1"]
        assert json.loads(eng.docker("info", "--format", "{{json .Swarm}}"))["LocalNodeState"] == "inactive"
    finally:
        _cleanup(ns, host_if)
        eng.destroy()


@pytest.mark.docker
def test_a_dead_runs_test_images_are_removed(docker_client):
    """An image a killed run imported (tests/integration/cli/conftest.py's busybox is tagged with the run's
    pid) is removed; a live run's, and a runner-test image with no owner in its tag, are not."""
    dead, me = _dead_pid(), os.getpid()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("tmp")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    refs = {tag: f"runner-test/leftover:{tag}" for tag in (f"pid{dead}", f"pid{me}", "kept")}
    for tag in refs:
        docker_client.api.import_image_from_data(buf.getvalue(), repository="runner-test/leftover", tag=tag)
    try:
        removed = sweep_images()  # another dead run's image may go too: only this test's are looked at
        assert [r for r in removed if "runner-test/leftover:" in r] == [f"image {refs[f'pid{dead}']}"]
        left = {t for i in docker_client.images.list(name="runner-test/leftover") for t in i.tags}
        assert left == {refs[f"pid{me}"], refs["kept"]}
    finally:
        for ref in refs.values():
            subprocess.run(["docker", "rmi", "--force", ref], capture_output=True)
