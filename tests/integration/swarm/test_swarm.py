"""executor swarm on a real two-node swarm (tests/integration/swarm/cluster.py): placement on both nodes,
a node drained or stopped under a session, a full cluster, the hardening a service can hold,
`runner nodes` and `runner gc`; nothing left on either node after each test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from executors import ExecRequest, InvalidConfig, SandboxGone
from executors.docker import Mount
from executors.swarm import SandboxUnplaced, SwarmExecutor

from .cluster import PREFIX, sh

POOL = f"{PREFIX}-pool"  # a node label the tests move between nodes


def ours(engine) -> list[str]:
    return engine("ps", "-aq", "--filter", f"label=runner.owner.pid={os.getpid()}").split()


@pytest.fixture
def cluster(swarm_cluster):
    """The cluster, with nothing of this process on either node or in the swarm afterwards,
    every node active and unlabelled again."""
    c = swarm_cluster
    yield c
    c.restart_worker_engine()
    for node in (c.manager_id, c.worker_id):
        c.activate(node)
        sh("docker", "node", "update", "--label-rm", POOL, node, check=False)
    services = sh("docker", "service", "ls", "-q", "--filter", f"label=runner.owner.pid={os.getpid()}").split()

    def networks():
        return sh("docker", "network", "ls", "-q", "--filter", "label=runner.swarm.network=true",
                  "--filter", f"label=runner.owner.pid={os.getpid()}").split()

    # Swarm removes a dead node's containers once it is back, and the manager's engine may list
    # an overlay network for a moment after the executor removed it (the endpoint of its task is
    # released asynchronously): both are waited for; nothing is removed here but services.
    deadline = time.monotonic() + 60
    while (ours(c.worker) or ours(lambda *a: sh("docker", *a)) or networks()) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {"services": services, "manager": ours(lambda *a: sh("docker", *a)), "worker": ours(c.worker),
            "networks": networks()}
    if services:
        sh("docker", "service", "rm", *services)
    assert not any(left.values()), f"left behind: {left}"


def make(cluster, tmp_path=None, **kw) -> SwarmExecutor:
    if tmp_path is not None:
        os.chmod(tmp_path, 0o777)
        kw.update(mounts=[Mount(source=str(tmp_path), target="/workspace")], workdir="/workspace")
    return SwarmExecutor(engines=cluster.engines(), labels={"runner.test": "swarm"}, **kw)


def on_node(cluster, ex: SwarmExecutor) -> str:
    """Which engine really holds the sandbox's container: 'manager' or 'worker'."""
    cid = ex.placed.container_id
    engines = [("manager", lambda *a: sh("docker", *a))]
    if cluster.proc is not None:  # the worker's engine runs
        engines.append(("worker", cluster.worker))
    where = [name for name, engine in engines if cid in engine("ps", "-q", "--no-trunc").split()]
    assert len(where) == 1, where
    return where[0]


def test_sandboxes_land_on_both_nodes_by_placement(cluster, tmp_path):
    a = make(cluster, tmp_path, placement=["node.role==manager"])
    b = make(cluster, tmp_path, placement=["node.role==worker"])
    with a, b:
        assert (on_node(cluster, a), on_node(cluster, b)) == ("manager", "worker")
        a.put_file("/workspace/from-a", b"written on the manager's sandbox\n")
        res = b.exec(ExecRequest(argv=["cat", "from-a"], cwd="/workspace"))
        assert (res.exit_code, res.stdout) == (0, b"written on the manager's sandbox\n")
        assert b.run(["hostname"]).stdout.decode().strip() != a.run(["hostname"]).stdout.decode().strip()


@pytest.mark.parametrize("fault", ["drain", "stop"])
def test_a_node_lost_mid_session_is_sandbox_gone_and_the_next_call_lands_elsewhere(cluster, fault):
    sh("docker", "node", "update", "--label-add", f"{POOL}=yes", cluster.worker_id)
    ex = make(cluster, placement=[f"node.labels.{POOL}==yes"])
    with ex:
        ex.start()
        assert on_node(cluster, ex) == "worker"
        assert ex.run(["echo", "before"]).stdout == b"before\n"
        sh("docker", "node", "update", "--label-add", f"{POOL}=yes", cluster.manager_id)
        hit = threading.Event()

        def lose_node():
            hit.wait()
            cluster.drain(cluster.worker_id) if fault == "drain" else cluster.stop_worker_engine()

        t = threading.Thread(target=lose_node)
        t.start()
        with pytest.raises(SandboxGone) as e:
            ex.exec(ExecRequest(argv=["sh", "-c", "echo running; sleep 120"]),
                    on_output=lambda stream, data: hit.set())
        t.join()
        said = str(e.value)
        assert "the swarm sandbox is gone" in said and cluster.ns_ip in said
        assert ("was drained" if fault == "drain" else "cannot be reached") in said
        res = ex.run(["echo", "after"])
        assert res.stdout == b"after\n"
        assert on_node(cluster, ex) == "manager"


def test_a_full_cluster_queues_then_places_when_room_frees(cluster):
    cpus = os.cpu_count()  # both nodes are this machine: each offers all its cpus
    first = make(cluster, limits={"cpus": cpus}, placement=["node.role==manager"])
    second = make(cluster, limits={"cpus": cpus}, placement=["node.role==worker"])
    third = make(cluster, limits={"cpus": cpus}, place_timeout=300)
    with first, second:
        waiting = threading.Thread(target=third.start)
        waiting.start()
        deadline = time.monotonic() + 60
        while not _pending_says_no_room(third) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pending_says_no_room(third), "the third sandbox was not queued by swarm"
        assert third.placed is None
        second.stop()
        waiting.join()
        try:
            assert third.placed is not None and on_node(cluster, third) == "worker"
            assert third.run(["echo", "placed"]).stdout == b"placed\n"
        finally:
            third.stop()


def _pending_says_no_room(ex) -> bool:
    if ex.service_id is None:
        return False
    tasks = ex.manager.api.tasks(filters={"service": ex.service_id})
    return any("insufficient resources" in (t.get("Status") or {}).get("Err", "") for t in tasks)


def test_a_full_cluster_refuses_clearly_after_the_timeout(cluster):
    ex = make(cluster, limits={"memory": 2**50}, place_timeout=3)
    with pytest.raises(SandboxUnplaced) as e:
        ex.start()
    said = str(e.value)
    assert "no swarm node took the sandbox within 3s" in said and "insufficient resources" in said
    assert ex.service_id is None  # removed, not left queued


def test_a_placement_no_node_matches_is_refused(cluster):
    ex = make(cluster, placement=["node.labels.nobody-has-this==1"], place_timeout=2)
    with pytest.raises(SandboxUnplaced, match="no node matches the placement"):
        ex.start()


def test_hardening_that_a_service_holds(cluster, tmp_path):
    ex = make(cluster, tmp_path, placement=["node.role==worker"], limits={"pids": 64, "memory": "128m"})
    with ex:
        status = ex.run(["cat", "/proc/self/status"]).stdout.decode()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["CapBnd"].strip() == "0000000000000000" and fields["CapEff"].strip() == "0000000000000000"
        assert fields["Seccomp"].strip() == "2"
        assert fields["Uid"].split()[0] == "1000"
        assert ex.run(["touch", "/etc/x"]).exit_code != 0  # read-only root
        assert ex.run(["cat", "/sys/fs/cgroup/pids/pids.max"]).stdout.strip() == b"64"
        assert ex.run(["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]).stdout.strip() == str(128 * 2**20).encode()
        mounts = ex.run(["grep", " /tmp ", "/proc/mounts"]).stdout.decode()
        assert "tmpfs" in mounts and "nosuid" in mounts and "nodev" in mounts
        # No route out, and the manager's own swarm port on the veth is out of reach.
        routes = ex.run(["cat", "/proc/net/route"]).stdout.decode().splitlines()[1:]
        assert routes and not any(r.split()[1] == "00000000" for r in routes)
        probe = ("import socket,sys\ns=socket.socket();s.settimeout(3)\n"
                 "try:\n s.connect((sys.argv[1],2377));print('connected')\nexcept OSError as e:print(type(e).__name__)")
        out = ex.run(["python3", "-c", probe, cluster.host_ip]).stdout.decode()
        assert "connected" not in out and out.strip(), out
        host = json.loads(cluster.worker("inspect", ex.placed.container_id))[0]["HostConfig"]
        assert host["LogConfig"]["Type"] == "none" and host["IpcMode"] == "private" and not host["Privileged"]
        # Its network is its own: internal, holding this sandbox alone.
        net = json.loads(sh("docker", "network", "inspect", ex.network_id))[0]
        assert net["Internal"] is True and net["Driver"] == "overlay"


@pytest.mark.parametrize("loosening, word", [({"cap_add": ["NET_RAW"]}, "cap_add"),
                                             ({"seccomp_unconfined": True}, "seccomp"),
                                             ({"network": "bridge"}, "network")])
def test_loosenings_a_service_cannot_hold_safely_are_refused(loosening, word):
    with pytest.raises(InvalidConfig, match=word):
        SwarmExecutor(**loosening)


def test_an_engine_reached_over_plain_tcp_is_refused():
    from executors.swarm import SwarmConfig, connect_engine

    with pytest.raises(InvalidConfig, match="needs the swarm backend.s tls"):
        connect_engine("tcp://127.0.0.1:2375", SwarmConfig())
    with pytest.raises(InvalidConfig, match="needs the swarm backend.s known_hosts"):
        connect_engine("ssh://root@127.0.0.1", SwarmConfig())


def test_a_node_without_a_known_engine_is_refused_and_nothing_is_left(cluster):
    ex = SwarmExecutor(engines={}, placement=["node.role==worker"])
    with pytest.raises(InvalidConfig, match="not in the swarm backend.s engines"):
        ex.start()
    assert ex.service_id is None


def test_runner_nodes_lists_nodes_capacity_and_live_sandboxes(cluster):
    def nodes(*args):
        return subprocess.run([sys.executable, "-m", "runner", "nodes", *args], capture_output=True, text=True,
                              timeout=60)

    ex = make(cluster, placement=["node.role==worker"], limits={"cpus": 1, "memory": "256m"})
    with ex:
        res = nodes("--json")
        assert res.returncode == 0, res.stderr
        rows = {r["id"]: r for r in json.loads(res.stdout)}
        worker, manager = rows[cluster.worker_id], rows[cluster.manager_id]
        assert ex.config.session in worker["sandboxes"] and ex.config.session not in manager["sandboxes"]
        assert worker["cpus"] - worker["cpus_free"] == pytest.approx(1.0)
        assert worker["memory"] - worker["memory_free"] == 256 * 2**20
        text = nodes().stdout
        assert cluster.ns_ip in text and ex.config.session in text


def test_runner_gc_reaps_an_orphaned_service_and_its_network(cluster):
    from executors.swarm import reap_orphans
    from runner.cli.maintenance import gc

    ex = make(cluster, ttl=0.001, placement=["node.role==worker"])
    ex.start()
    service, network, cid = ex.service_id, ex.network_id, ex.placed.container_id
    time.sleep(0.01)  # past its ttl
    # `runner gc` lists it (dry run: a real gc here would also reap other helpers' orphans on the
    # shared engine), then the swarm reaper it calls removes it.
    listed = gc(dry_run=True)
    assert any(r[0] == service[:12] and "expired" in r[2] for r in listed), listed
    removed = reap_orphans(ex.manager)
    assert any(r[0] == service[:12] and "expired" in r[2] for r in removed), removed
    assert not sh("docker", "service", "ls", "-q", "--filter", f"id={service}")
    deadline = time.monotonic() + 60
    while cid in cluster.worker("ps", "-aq", "--no-trunc").split() and time.monotonic() < deadline:
        time.sleep(0.2)
    while network in sh("docker", "network", "ls", "-q", "--no-trunc").split() and time.monotonic() < deadline:
        reap_orphans(ex.manager)
        time.sleep(0.2)
    assert network not in sh("docker", "network", "ls", "-q", "--no-trunc").split()
    ex.service_id = ex.network_id = ex.placed = None  # reaped: nothing of it left to stop


def test_a_node_engine_over_ssh_is_reached_with_the_named_known_hosts_only(cluster, tmp_path, monkeypatch):
    """The production way to a node's engine: ssh:// with host keys from the configured file
    alone. Here the manager's engine, behind a real sshd on loopback."""
    from executors import EngineUnavailable

    from ..ssh.sshd import make_sshd

    server = make_sshd(tmp_path / "sshd").start()
    try:
        url = f"ssh://root@127.0.0.1:{server.port}"
        engines = {cluster.manager_id: url, cluster.worker_id: cluster.worker_url}
        ex = SwarmExecutor(engines=engines, known_hosts=server.known_hosts, ssh_key=server.client_key,
                           placement=["node.role==manager"])
        with ex:
            assert ex.run(["sh", "-c", "cat; echo over ssh"], stdin=b"in ").stdout == b"in over ssh\n"
            assert ex._node is not ex.manager and ex._node.api.base_url.startswith("http+docker://ssh")
        other = (tmp_path / "sshd" / "other.pub").read_text().split()
        wrong = tmp_path / "wrong_known_hosts"
        wrong.write_text(f"[127.0.0.1]:{server.port} {other[0]} {other[1]}\n")
        # the user's own known_hosts would accept the server: it must not be consulted
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "known_hosts").write_text(open(server.known_hosts).read())
        monkeypatch.setenv("HOME", str(home))
        ex = SwarmExecutor(engines=engines, known_hosts=str(wrong), ssh_key=server.client_key,
                           placement=["node.role==manager"])
        with pytest.raises(EngineUnavailable, match=f"127.0.0.1:{server.port}"):
            ex.start()
        assert ex.service_id is None
    finally:
        server.stop()


def test_an_image_a_node_lacks_is_refused_clearly_and_never_pulled(cluster):
    """Services name the image by its id on the manager, so a node never asks a registry: a
    node without it fails the task, and that is told as the image to load there."""
    from executors import ImageNotFound

    assert "runner/node" not in cluster.worker("images", "--format", "{{.Repository}}")
    ex = make(cluster, image="runner/node:latest", placement=["node.role==worker"])
    with pytest.raises(ImageNotFound, match="not on the node the sandbox landed on"):
        ex.start()
    assert ex.service_id is None


def test_a_placed_container_that_is_not_what_was_asked_for_is_refused(cluster, monkeypatch):
    """The spec is checked on the container the node really made (here: a spec that lost its
    read-only root and its capability drop on the way)."""
    import executors.swarm as swarm_mod

    real = swarm_mod.service_spec

    def loosened(*a, **kw):
        spec = real(*a, **kw)
        spec["ContainerSpec"]["ReadOnly"] = False
        del spec["ContainerSpec"]["CapabilityDrop"]
        return spec

    monkeypatch.setattr(swarm_mod, "service_spec", loosened)
    ex = make(cluster, placement=["node.role==worker"])
    with pytest.raises(swarm_mod.ExecutorError, match="root filesystem is writable.*capabilities"):
        ex.start()
    assert ex.service_id is None


@pytest.mark.parametrize("node", ["manager", "worker"])
def test_a_source_swapped_for_a_link_before_the_node_mounts_it_never_reaches_the_sandbox(cluster, tmp_path, monkeypatch,
                                                                                          node):
    """A node's engine resolves a bind mount's source by name when it starts the task, following
    links, seconds after runner checked the workspace: a pin (an ancestor of a protected path,
    mounted read-write) swapped for a link to /srv meanwhile handed the swarm sandbox the host's
    /srv, read-write (the docker executor checked the mount it got; the swarm one did not). Now
    a node that is this machine is looked at as docker's are, and the sandbox never starts."""
    import shutil
    import uuid
    from pathlib import Path

    import executors.swarm as swarm_mod
    from runner import Runner

    ws = tmp_path / "ws"
    host = Path("/srv") / f"runner-test-{uuid.uuid4().hex[:12]}"  # our own, made here
    (host / "ro").mkdir(parents=True)
    (host / "host-file").write_text("host file\n")
    os.chown(host, 1000, 1000)  # a host directory the sandbox's user may write
    (ws / "keep" / host.name / "ro").mkdir(parents=True)
    for d, dirs, files in os.walk(ws):  # the sandbox runs as the workspace's owner
        for name in [".", *dirs, *files]:
            os.chown(os.path.join(d, name), 1000, 1000)
    real = swarm_mod.service_spec

    def spec(*a, **kw):  # the swap, as a process racing the sandbox's placement would
        if not (ws / "keep").is_symlink():
            os.rename(ws / "keep", ws / "keep.real")
            (ws / "keep").symlink_to("/srv")
        return real(*a, **kw)

    monkeypatch.setattr(swarm_mod, "service_spec", spec)
    overrides = {"sandbox.placement": [f"node.role=={node}"]}
    try:
        with pytest.raises(InvalidConfig, match="mount at /workspace/keep is not the .* runner checked"):
            with Runner(executor="swarm", workspace=ws, preset="all", protect=[f"keep/{host.name}/ro"], pool_size=0,
                        overrides=overrides, backend={"engines": cluster.engines()}) as r:
                res = r.call("bash", {"command": f"cat /srv/{host.name}/host-file; touch /srv/{host.name}/written"})
                pytest.fail(f"the sandbox started and read: {res.text!r}")
        assert not (host / "written").exists()
    finally:
        shutil.rmtree(host)


def test_runner_refuses_allowlist_mode_on_swarm(tmp_path):
    from runner import Runner
    from runner.errors import RunnerError

    with pytest.raises(RunnerError, match="executor swarm runs sandboxes without a network"):
        Runner(executor="swarm", workspace=tmp_path,
               overrides={"network.mode": "allowlist", "network.allow": ["example.org:443"]})


def test_runner_session_on_a_drained_node_is_told_and_the_next_call_runs_elsewhere(cluster, tmp_path):
    """The full Runner: the call in flight when its node is drained gets an error naming the
    drain, and the session's next call gets a fresh sandbox on the other node."""
    from runner import Runner

    sh("docker", "node", "update", "--label-add", f"{POOL}=yes", cluster.worker_id)
    overrides = {"sandbox.placement": [f"node.labels.{POOL}==yes"]}
    with Runner(executor="swarm", workspace=tmp_path, preset="all", overrides=overrides,
                backend={"engines": cluster.engines()}) as r:
        assert r.call("bash", {"command": "echo first"}).text.strip() == "first"
        assert r.session._sandbox.executor.placed.node_id == cluster.worker_id
        sh("docker", "node", "update", "--label-add", f"{POOL}=yes", cluster.manager_id)
        t = threading.Timer(3, cluster.drain, args=(cluster.worker_id,))
        t.start()
        res = r.call("bash", {"command": "sleep 60", "timeout": 100})
        t.join()
        assert res.is_error and "the sandbox died during this call" in res.text and "was drained" in res.text
        assert r.call("bash", {"command": "echo second"}).text.strip() == "second"
        assert r.session._sandbox.executor.placed.node_id == cluster.manager_id
