"""A real two-node Docker Swarm on this one machine, for tests and bench/swarm.py.

The manager is this machine's engine (shared with every other test running now: nothing of it
is touched but its swarm membership, and that is left as found). The worker is a second
`dockerd` in a network namespace made here, started with `nsenter --net=` (not `ip netns exec`,
which remounts /sys and hides the cgroups), reached over a veth pair on a private /30:

    host  rswt<pid>h  10.254.214.1/30  <-- swarm manager, advertise address
    netns rswt<pid>n  10.254.214.2/30  <-- worker's engine (own data-root, exec-root, socket, pidfile)

Everything is named `runner-swarm-test-<pid>` (paths, netns, node label) so it is told apart
from what other helpers start. `Cluster.close()` removes all of it, also after a failed start.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ..faults.privengine import drop_stale_containerd_pid
from ...leftovers import owner_alive, remove_tree

PREFIX = "runner-swarm-test"
MADE_BY = f"{PREFIX}-made-by"  # manager node label: the pid of the test run that made the swarm
MAIN_ENGINE = "unix:///var/run/docker.sock"


def sh(*argv: str, check: bool = True, input: bytes | None = None, timeout: float = 120) -> str:
    res = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout.decode(errors="replace").strip()


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 no route of this machine covers (nor any other helper's veth)."""
    used = [ipaddress.ip_network(r.split()[0], strict=False) for r in sh("ip", "-4", "route").splitlines()
            if r and r.split()[0][0].isdigit()]
    for third in range(214, 250):
        for fourth in range(0, 256, 4):
            net = ipaddress.ip_network(f"10.254.{third}.{fourth}/30")
            if not any(net.overlaps(u) for u in used):
                return net
    raise RuntimeError("no free /30 under 10.254.0.0/16 for the test's veth pair")


class Cluster:
    """Manager = the main engine; one worker = a private dockerd in a netns. A context manager."""

    def __init__(self, images: tuple[str, ...] = ("runner/base:latest",)) -> None:
        n = os.getpid()
        self.name = f"{PREFIX}-{n}"
        self.netns = self.name
        self.veth_host, self.veth_ns = f"rswt{n}h", f"rswt{n}n"
        self.dir = Path(f"/run/{self.name}")
        self.data_root = Path(f"/var/lib/{self.name}")
        self.sock = self.dir / "docker.sock"
        self.worker_url = f"unix://{self.sock}"
        self.manager_url = MAIN_ENGINE
        self.images = images
        self.proc: subprocess.Popen | None = None
        self.was_swarm: dict | None = None
        self.made_swarm = False
        self.gwbridge_before = False
        self.worker_id: str | None = None
        self.manager_id: str | None = None
        self.subnet: ipaddress.IPv4Network | None = None

    # -- addresses ------------------------------------------------------------------
    @property
    def host_ip(self) -> str:
        return str(list(self.subnet.hosts())[0])

    @property
    def ns_ip(self) -> str:
        return str(list(self.subnet.hosts())[1])

    def engines(self) -> dict[str, str]:
        """The executor's node -> engine map (by node id)."""
        return {self.manager_id: self.manager_url, self.worker_id: self.worker_url}

    # -- start ----------------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        info = json.loads(sh("docker", "info", "--format", "{{json .Swarm}}"))
        self.gwbridge_before = bool(sh("docker", "network", "ls", "-q", "--filter", "name=^docker_gwbridge$"))
        if info.get("LocalNodeState") == "active":
            if not info.get("ControlAvailable"):
                raise RuntimeError("this engine is a swarm worker already: the test needs it as a manager")
            self.was_swarm = info
        self.subnet = _free_subnet()
        sh("ip", "netns", "add", self.netns)
        sh("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
        sh("ip", "link", "set", self.veth_ns, "netns", self.netns)
        sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_host)
        sh("ip", "link", "set", self.veth_host, "up")
        sh("ip", "-n", self.netns, "addr", "add", f"{self.ns_ip}/30", "dev", self.veth_ns)
        sh("ip", "-n", self.netns, "link", "set", self.veth_ns, "up")
        sh("ip", "-n", self.netns, "link", "set", "lo", "up")
        # a manager advertised on another subnet (a swarm this engine was in already) is reached
        # through the host end of the pair; the host delivers locally, so no forwarding is needed
        sh("ip", "-n", self.netns, "route", "add", "default", "via", self.host_ip)
        self.start_worker_engine()
        if self.was_swarm is None:
            sh("docker", "swarm", "init", "--advertise-addr", self.host_ip, "--listen-addr", f"{self.host_ip}:2377")
            self.made_swarm = True
        self.manager_id = json.loads(sh("docker", "info", "--format", "{{json .Swarm}}"))["NodeID"]
        if self.made_swarm:
            sh("docker", "node", "update", "--label-add", f"{MADE_BY}={os.getpid()}", self.manager_id)
        else:
            self._refuse_a_live_runs_swarm()
        token = sh("docker", "swarm", "join-token", "-q", "worker")
        addr = self.host_ip if self.made_swarm else self.was_swarm["RemoteManagers"][0]["Addr"].rsplit(":", 1)[0]
        self.worker("swarm", "join", "--token", token, "--advertise-addr", self.ns_ip, f"{addr}:2377")
        self.worker_id = json.loads(self.worker("info", "--format", "{{json .Swarm}}"))["NodeID"]
        sh("docker", "node", "update", "--label-add", f"{PREFIX}={self.name}", self.worker_id)
        self.wait_ready(self.worker_id)
        for image in self.images:
            self.load_image(image)

    def _refuse_a_live_runs_swarm(self) -> None:
        """Another test run on this machine made this swarm and still runs: it leaves the swarm at
        its end, under this run's worker. Say so, rather than fail later in odd ways."""
        labels = json.loads(sh("docker", "node", "inspect", "--format", "{{json .Spec.Labels}}", self.manager_id))
        maker = (labels or {}).get(MADE_BY)
        if maker and int(maker) != os.getpid() and owner_alive(int(maker)):
            raise RuntimeError(f"the main engine is manager of a test swarm made by the test run of pid {maker}, "
                               "which still runs: two runs of the swarm tests on one machine cannot share it; "
                               "run them one at a time")

    def worker(self, *args: str, **kw) -> str:
        return sh("docker", "-H", self.worker_url, *args, **kw)

    def start_worker_engine(self) -> None:
        for stale in ("docker.pid", "docker.sock"):
            (self.dir / stale).unlink(missing_ok=True)
        # stop_worker_engine's SIGKILL leaves containerd.pid naming a pid the kernel may have
        # reused since (the failure seen at 18:49: "containerd is still running pid=…", then
        # "timeout waiting for containerd to start")
        drop_stale_containerd_pid(self.dir / "exec" / "containerd")
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.data_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.dir / "daemon.json").write_text("{}")
        self.log = open(self.dir / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.netns}", "dockerd", "--config-file", str(self.dir / "daemon.json"),
             "--data-root", str(self.data_root), "--exec-root", str(self.dir / "exec"), "-H", self.worker_url,
             "--pidfile", str(self.dir / "docker.pid"), "--iptables=false", "--ip6tables=false", "--bridge=none",
             "--ip-masq=false"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", self.worker_url, "version"], capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker's dockerd did not start: {(self.dir / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def wait_ready(self, node: str, state: str = "ready", timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sh("docker", "node", "inspect", "--format", "{{.Status.State}}", node) != state:
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node} is not {state} after {timeout:g}s")
            time.sleep(0.3)

    def load_image(self, image: str) -> None:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        try:
            subprocess.run(["docker", "-H", self.worker_url, "load", "-q"], stdin=save.stdout, check=True,
                           capture_output=True, timeout=300)
        finally:
            save.stdout.close()
            save.wait()

    # -- faults ---------------------------------------------------------------------
    def drain(self, node: str) -> None:
        sh("docker", "node", "update", "--availability", "drain", node)

    def activate(self, node: str) -> None:
        sh("docker", "node", "update", "--availability", "active", node)

    def stop_worker_engine(self) -> None:
        """The worker machine goes away: its dockerd (and its containerd, shims and containers) killed."""
        if self.proc is None:
            return
        pids = self._worker_tree()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        self.proc = None

    def restart_worker_engine(self) -> None:
        """The worker machine comes back: same data-root, so it rejoins the swarm by itself."""
        if self.proc is None or self.proc.poll() is not None:
            self.start_worker_engine()
        self.wait_ready(self.worker_id)

    def _worker_tree(self) -> list[int]:
        """The worker dockerd and every process below it (containerd, shims, sandboxes): found by
        walking /proc from its pid, never by name."""
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        # containerd's shims leave the tree (they re-parent to pid 1): they are found by the
        # address of this engine's own containerd on their command line
        mine = f"{self.dir}/exec/containerd/containerd.sock".encode()
        roots = [self.proc.pid]
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if mine in Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0"):
                        roots.append(int(d))
                except OSError:
                    continue
        out, stack = [], roots
        while stack:
            p = stack.pop()
            out.append(p)
            stack.extend(children.get(p, []))
        return out

    # -- teardown -------------------------------------------------------------------
    def close(self) -> None:
        steps = [self._remove_services, self._worker_leave, self._stop_engine, self._manager_forget_worker,
                 self._leave_swarm, self._remove_net, self._remove_dirs]
        errors = []
        for step in steps:
            try:
                step()
            except Exception as e:
                errors.append(f"{step.__name__}: {e}")
        if errors:
            raise RuntimeError("cluster teardown: " + "; ".join(errors))

    def _remove_services(self) -> None:
        if self.manager_id is None:
            return
        ids = sh("docker", "service", "ls", "-q", "--filter", f"label=runner.owner.pid={os.getpid()}").split()
        if ids:
            sh("docker", "service", "rm", *ids)

    def _worker_leave(self) -> None:
        if self.proc is not None and self.worker_id is not None:
            self.worker("swarm", "leave", "--force", check=False, timeout=60)

    def _stop_engine(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.stop_worker_engine()
        self.proc = None

    def _manager_forget_worker(self) -> None:
        if self.worker_id is not None and not self.made_swarm:
            sh("docker", "node", "rm", "--force", self.worker_id, check=False)

    def _leave_swarm(self) -> None:
        if not self.made_swarm:
            return
        sh("docker", "swarm", "leave", "--force", timeout=120)
        self.made_swarm = False
        if not self.gwbridge_before:
            sh("docker", "network", "rm", "docker_gwbridge", check=False)

    def _remove_net(self) -> None:
        sh("ip", "link", "del", self.veth_host, check=False)
        if os.path.exists(f"/var/run/netns/{self.netns}"):
            sh("ip", "netns", "del", self.netns)

    def _remove_dirs(self) -> None:
        for d in (self.data_root, self.dir):
            if d.exists():
                remove_tree(d)  # leftover mounts of the worker's engine (overlay, netns files) first
