"""The swarm backend: each sandbox is a Docker Swarm service with one replica and no restart.

Swarm places it (the policy's limits are its reservations and limits, `placement` its
constraints); the controller then reaches the one container of that service through the engine
of the node it landed on (`engines`: node id, hostname or address -> engine URL) and runs every
command there with `docker exec`, exactly as the docker backend does (same process code).

What the docker backend's hardening becomes on a service (Docker 20.10, API 1.41):
- expressed: cap drop ALL, read-only root, docker-init, pids/memory/cpu limits, user, workdir,
  env, /tmp as a sized tmpfs (swarm adds noexec to it), log driver none, bind mounts, labels;
- network none: swarm cannot attach a service to the node-local `none` network (only `host` and
  `bridge` are predefined for services), and a service with no network gets the node's default
  bridge. Each sandbox gets its own `--internal` overlay network instead (no gateway, no other
  member) with its DNS upstream pointed at its own loopback, and the container is checked to hold
  that network alone before the first command runs;
- no-new-privileges and seccomp profiles: not in a 1.41 service spec. The engine's default
  seccomp profile applies (checked: Seccomp 2 in the sandbox); loosening it (`seccomp_unconfined`)
  or adding capabilities (`cap_add`, which a setuid binary could then raise to without
  no-new-privileges) is refused. With every capability out of the bounding set, a setuid binary
  gains uid 0 and no capability;
- runtime (gVisor): not in a service spec. A requested runtime becomes a placement constraint on
  the engine label `runner.runtime` and is checked on the placed container; a mismatch is refused.
- mount sources: the node's engine resolves each bind source by name, following links, when it
  starts the task, seconds after runner checked the workspace. On a node that is this machine the
  placed container's mounts are checked as the docker backend checks its own (mounts.check_started);
  a node elsewhere cannot be looked at from here.
"""
from __future__ import annotations

import posixpath
import threading
import time
import typing
import uuid

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .base import Executor, Process
from .docker import labels as L
from .docker.config import SandboxConfig, merged_limits
from .docker.hardening import host_pids_limit
from .docker.process import PID_WRAPPER, ExecProcess
from .errors import EngineUnavailable, ExecutorError, InvalidConfig, SandboxGone
from .models import DEFAULT_LIMITS, ExecRequest

KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 3600; done"]
NETWORK = "runner.swarm.network"  # label on a sandbox's own overlay network
SANDBOX_DNS = ["127.0.0.1"]  # the embedded resolver forwards unknown names upstream: a dead end
RUNTIME_LABEL = "runner.runtime"  # engine label saying which runtime a node's sandboxes get
FAILED_STATES = {"failed", "rejected", "shutdown", "complete", "orphaned", "remove"}


class SandboxUnplaced(ExecutorError):
    """No node could take the sandbox within the placement timeout."""


class EngineTLS(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ca: str = Field(description="CA certificate the nodes' engine certificates are checked against")
    cert: str = Field(description="the controller's client certificate")
    key: str = Field(description="the controller's client key")


class SwarmConfig(SandboxConfig):
    """A docker SandboxConfig plus where the swarm is and how its nodes' engines are reached."""

    manager: str | None = Field(default=None, description="a manager's engine URL; default $DOCKER_HOST or the "
                                "local socket")
    placement: list[str] = Field(default_factory=list, description="swarm constraints, e.g. node.labels.pool==ci")
    engines: dict[str, str] = Field(default_factory=dict, description="node id, hostname or address -> its engine "
                                    "URL (unix://, tcp:// with tls, ssh:// with known_hosts); the manager's own "
                                    "node defaults to the manager's URL")
    tls: EngineTLS | None = Field(default=None, description="mutual TLS for tcp:// engines (required for them)")
    known_hosts: str | None = Field(default=None, description="known_hosts file for ssh:// engines (required "
                                    "for them; the user's own files are not consulted)")
    ssh_key: str | None = Field(default=None, description="private key for ssh:// engines (default: the ssh agent)")
    place_timeout: float = Field(default=60.0, gt=0, description="seconds a sandbox may wait for a node with room "
                                 "(queued by swarm) before it is refused")

    @field_validator("placement")
    @classmethod
    def _constraints(cls, v: list[str]) -> list[str]:
        for c in v:
            if not any(op in c for op in ("==", "!=")) or "\n" in c:
                raise ValueError(f"bad placement constraint {c!r}: use e.g. node.labels.pool==ci")
        return v


def check_expressible(cfg: SwarmConfig) -> None:
    """Refuse what a 1.41 service cannot hold safely (the module docstring says why)."""
    if cfg.network != "none":
        raise InvalidConfig(f"executor swarm runs sandboxes without a network; network {cfg.network!r} (allowlist "
                            "mode) is the docker backend's only")
    if cfg.seccomp_unconfined:
        raise InvalidConfig("executor swarm cannot loosen seccomp: a service spec (API 1.41) has no security options")
    if cfg.cap_add:
        raise InvalidConfig("executor swarm refuses cap_add: a service cannot set no-new-privileges (API 1.41), so "
                            "any setuid binary in the image could raise itself to the added capabilities")
    if not cfg.no_new_privileges:
        pass  # nothing to loosen: a service never has it
    if cfg.lifecycle != "per-session":
        raise InvalidConfig("executor swarm keeps one service per sandbox (lifecycle per-session); for a fresh "
                            "sandbox per call, use one executor per call")


LOST_FOR = 120.0  # seconds at most that a node that lost a sandbox gets no new one from this process
_lost: dict[str, tuple[float, object]] = {}  # node id -> (when a sandbox was lost there, its engine's client)


def lost_nodes() -> list[str]:
    """Nodes that lost a sandbox of this process and whose engine still does not answer (for at
    most LOST_FOR seconds). The manager calls a node whose engine just died `ready` until its
    heartbeats run out, and would hand it the next sandbox, to wait there, assigned, for ever."""
    now = time.monotonic()
    for node, (when, client) in list(_lost.items()):
        if now - when > LOST_FOR:
            _lost.pop(node, None)
            continue
        try:
            client.api._get(client.api._url("/_ping"), timeout=3).raise_for_status()
            _lost.pop(node, None)  # it answers again (or it was only drained)
        except Exception:
            pass
    return list(_lost)


def service_spec(cfg: SwarmConfig, labels: dict[str, str], network_id: str, image_id: str,
                 avoid: list[str] = ()) -> dict:
    """The TaskTemplate (a plain API 1.41 dict) realising cfg. The image is given by its id: a node
    then never tries a registry (swarm pulls a tag at every task start) and runs exactly the bytes
    the manager has, or fails the task with "No such image"."""
    lim = merged_limits(DEFAULT_LIMITS, cfg.limits)
    mounts = [{"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only} for m in cfg.mounts]
    mounts.append({"Type": "tmpfs", "Target": "/tmp", "TmpfsOptions": {"SizeBytes": lim.tmpfs, "Mode": 0o1777}})
    container = {
        "Image": image_id, "Command": KEEPALIVE, "User": cfg.user, "Labels": labels,
        "Env": [f"{k}={v}" for k, v in cfg.env.items()], "Mounts": mounts,
        "ReadOnly": cfg.read_only_root, "Init": cfg.init, "CapabilityDrop": ["ALL"],
        "DNSConfig": {"Nameservers": list(cfg.dns if cfg.dns is not None else SANDBOX_DNS)},
        "StopGracePeriod": 1_000_000_000,
    }
    if cfg.workdir:
        container["Dir"] = cfg.workdir
    limits, reserve = {}, {}
    if lim.cpus:
        limits["NanoCPUs"] = reserve["NanoCPUs"] = int(lim.cpus * 1e9)
    if lim.memory:
        limits["MemoryBytes"] = reserve["MemoryBytes"] = lim.memory
    if lim.pids:
        limits["Pids"] = host_pids_limit(lim.pids, cfg.runtime)
    constraints = list(cfg.placement) + [f"node.id!={n}" for n in avoid]
    if cfg.runtime:
        constraints.append(f"engine.labels.{RUNTIME_LABEL}=={cfg.runtime}")
    return {
        "ContainerSpec": container,
        "Resources": {"Limits": limits, "Reservations": reserve},
        "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
        "Placement": {"Constraints": constraints},
        "LogDriver": {"Name": "none", "Options": {}},
        "Networks": [{"Target": network_id}],
    }


class Placed(BaseModel):
    """Where the sandbox's one task runs."""

    node_id: str
    hostname: str
    addr: str
    container_id: str
    task_id: str


class SwarmExecutor(Executor):
    name = "swarm"

    def __init__(self, config: SwarmConfig | None = None, *, manager_client=None, **fields) -> None:
        if config is not None and fields:
            raise TypeError("give a SwarmConfig or its fields, not both")
        self.config = config or SwarmConfig(**fields)
        check_expressible(self.config)
        self.config.validate_mounts()
        self.instance = uuid.uuid4().hex[:12]
        self._manager = manager_client
        self._engines: dict[str, object] = {}  # engine URL -> client
        self._lock = threading.Lock()
        self.service_id: str | None = None
        self.network_id: str | None = None
        self.placed: Placed | None = None
        self._node = None  # the engine of the node the sandbox runs on
        self.gone_reason: str | None = None

    # -- engines --------------------------------------------------------------------
    @property
    def manager(self):
        if self._manager is None:
            from .docker.engine import connect

            client = connect(self.config.manager)
            swarm = client.info().get("Swarm") or {}
            if not swarm.get("ControlAvailable"):
                raise EngineUnavailable(f"the engine at {self.config.manager or 'the local socket'} is no swarm manager "
                                        f"(state {swarm.get('LocalNodeState') or 'inactive'}): point the swarm "
                                        "backend's manager at one, or `docker swarm init` there")
            self._manager = client
        return self._manager

    def node_client(self, node: dict):
        """The engine of `node` (an inspect dict), from the engines map or, for the manager's own
        node, the manager's client."""
        desc = node.get("Description") or {}
        keys = [node["ID"], desc.get("Hostname", ""), (node.get("Status") or {}).get("Addr", "")]
        url = next((self.config.engines[k] for k in keys if k in self.config.engines), None)
        if url is None:
            if node["ID"] == (self.manager.info().get("Swarm") or {}).get("NodeID"):
                return self.manager
            raise InvalidConfig(f"the sandbox landed on node {desc.get('Hostname')} ({node['ID'][:12]}, "
                                f"{keys[2]}), whose engine is not in the swarm backend's engines: add it, or keep "
                                "sandboxes off that node with a placement constraint")
        if url not in self._engines:
            self._engines[url] = connect_engine(url, self.config)
        return self._engines[url]

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self.service_id is None:
                self._create()

    def _create(self) -> None:
        import docker.errors

        cfg, api = self.config, self.manager.api
        self.gone_reason = None
        labels = L.make_labels(cfg.session, cfg.ttl, role="session",
                               extra={**cfg.labels, L.EXECUTOR: self.instance})
        name = f"runner-{cfg.session}-{self.instance}"
        image_id = self._image_id()
        try:
            net = api.create_network(name, driver="overlay", internal=True, attachable=False,
                                     labels={**labels, NETWORK: "true"})
            self.network_id = net["Id"]
            svc = api.create_service(service_spec(cfg, labels, self.network_id, image_id, lost_nodes()), name=name, labels=labels,
                                     mode={"Replicated": {"Replicas": 1}})
            self.service_id = svc["ID"]
            self.placed = self._wait_placed()
            self._check_container()
        except BaseException as e:
            self._remove()
            if isinstance(e, docker.errors.ImageNotFound):
                raise
            if isinstance(e, docker.errors.APIError):
                raise ExecutorError(f"swarm refused the sandbox service: {e.explanation or e}") from None
            raise

    def _image_id(self) -> str:
        """The image's id on the manager (an id is taken as given): what every node must hold."""
        image = self.config.image
        if image.startswith("sha256:") and len(image) == 71:
            return image
        from .docker.engine import require_image

        require_image(self.manager, image)
        return self.manager.images.get(image).id

    def _wait_placed(self) -> Placed:
        """Wait until the one task runs; swarm queues it while no node has room (pending)."""
        api = self.manager.api
        deadline = time.monotonic() + self.config.place_timeout
        delay, last = 0.02, None
        while True:
            tasks = api.tasks(filters={"service": self.service_id})
            task = max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)
            if task is not None:
                status = task.get("Status") or {}
                state, last = status.get("State"), status
                if state == "running":
                    cid = (status.get("ContainerStatus") or {}).get("ContainerID")
                    node = api.inspect_node(task["NodeID"])
                    return Placed(node_id=node["ID"], hostname=(node.get("Description") or {}).get("Hostname", "?"),
                                  addr=(node.get("Status") or {}).get("Addr", ""), container_id=cid,
                                  task_id=task["ID"])
                if state in FAILED_STATES:
                    why = status.get("Err") or status.get("Message") or state
                    if "No such image" in why:
                        from .errors import ImageNotFound

                        raise ImageNotFound(f"image {self.config.image} is not on the node the sandbox landed on: "
                                            f"load it there (runner never pulls images); swarm says: {why}")
                    raise ExecutorError(f"the sandbox's task did not start: {why}")
            if time.monotonic() >= deadline:
                why = (last or {}).get("Err") or (last or {}).get("Message") or "no task yet"
                raise SandboxUnplaced(
                    f"no swarm node took the sandbox within {self.config.place_timeout:g}s (swarm: {why}); the "
                    f"cluster is full or no node matches the placement {self.config.placement or '(none)'}: free "
                    "capacity, add nodes, or raise the swarm backend's place_timeout")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _check_container(self) -> None:
        """The placed container holds what the spec asked for: read-only root, no capability,
        its own internal network alone, the requested runtime, and (on a node that is this
        machine) the workspace's mount sources runner checked. Anything else is refused."""
        node = self.manager.api.inspect_node(self.placed.node_id)
        client = self._node = self.node_client(node)
        info = client.api.inspect_container(self.placed.container_id)
        host = info.get("HostConfig") or {}
        nets = list(((info.get("NetworkSettings") or {}).get("Networks") or {}).values())
        wrong = []
        if self.config.read_only_root and not host.get("ReadonlyRootfs"):
            wrong.append("its root filesystem is writable")
        if host.get("CapDrop") != ["ALL"] or host.get("CapAdd") or host.get("Privileged"):
            wrong.append(f"its capabilities are {host.get('CapAdd') or 'not all dropped'}")
        if len(nets) != 1 or nets[0].get("NetworkID") != self.network_id:
            wrong.append("it is on networks other than its own internal one")
        if self.config.runtime and host.get("Runtime") != self.config.runtime:
            wrong.append(f"it runs under {host.get('Runtime')}, not {self.config.runtime}")
        if wrong:
            raise ExecutorError(f"the sandbox on node {self.placed.hostname} is not what was asked for: "
                                f"{'; '.join(wrong)}; refused and removed")
        self._check_mounts(client, info)

    def _check_mounts(self, client, info: dict) -> None:
        """As the docker executor does (mounts.check_if_here), on the node the sandbox landed on:
        its engine resolves a bind mount's source by name when it starts the task, following
        links, seconds after runner checked it, so a protected directory or a pin swapped for a
        link meanwhile would hand the sandbox that host directory. InvalidConfig: the caller
        removes the service. A node elsewhere cannot be looked at from here."""
        from .docker.mounts import check_if_here
        from .docker.runtimes import engine_info

        check_if_here(self.config.mounts, lambda: engine_info(f"swarm-node:{self.placed.node_id}", client.info),
                      lambda: info)

    def stop(self) -> None:
        with self._lock:
            self._remove()

    def _remove(self) -> None:
        """Remove the service, wait (bounded) for its container to leave its node, then the network."""
        svc, net, placed = self.service_id, self.network_id, self.placed
        self.service_id = self.network_id = self.placed = None
        if self._manager is None:
            return
        api = self._manager.api
        if svc is not None:
            try:
                api.remove_service(svc)
            except Exception:
                pass
        if placed is not None and self._node is not None:
            # Not waiting for swarm to stop it (a grace period, then its agent's removal): the
            # service is gone, so its container goes now, on its node's engine.
            try:
                self._node.api.remove_container(placed.container_id, force=True)
            except Exception:
                pass  # already gone, or the node is down (swarm removes it when it returns)
        if net is not None:
            deadline = time.monotonic() + 30
            while True:
                try:
                    api.remove_network(net)
                    break
                except Exception as e:
                    if "not found" in str(e).lower() or time.monotonic() >= deadline:
                        break
                    time.sleep(0.1)

    def is_alive(self) -> bool:
        return self.placed is not None and self._why_gone() is None

    # -- commands -------------------------------------------------------------------
    def _cwd(self, cwd: str | None) -> str | None:
        if not cwd or cwd.startswith("/"):
            return cwd
        return posixpath.join(self.config.workdir or "/", cwd)

    def spawn(self, req: ExecRequest) -> Process:
        import docker.errors

        if self.placed is None:
            self.start()
        placed, client = self.placed, self._node
        user = req.user or self.config.user
        started = time.time()
        try:
            ex = client.api.exec_create(
                placed.container_id, PID_WRAPPER + req.argv, stdin=True, stdout=True, stderr=True,
                environment={**self.config.env, **req.env} or None,
                workdir=self._cwd(req.cwd) or self.config.workdir, user=user)
            sock = client.api.exec_start(ex["Id"], socket=True)
        except docker.errors.APIError as e:
            if e.status_code in (404, 409) or "is not running" in str(e):
                self._gone()
            raise
        except Exception:  # the node's engine does not answer: the node is down or unreachable
            self._gone()
            raise
        return SwarmExecProcess(self, client, placed.container_id, ex["Id"], sock, user, started)

    def _why_gone(self) -> str | None:
        """Why the sandbox's task is no longer running (node drained, down, task failed), or None."""
        placed = self.placed
        if placed is None:
            return self.gone_reason or "the sandbox was stopped"
        try:
            task = self._manager.api.inspect_task(placed.task_id)
            node = self._manager.api.inspect_node(placed.node_id)
        except Exception as e:
            return f"the swarm manager lost the sandbox's task ({e})"
        avail = (node.get("Spec") or {}).get("Availability")
        nstate = (node.get("Status") or {}).get("State")
        status = task.get("Status") or {}
        where = f"node {placed.hostname} ({placed.node_id[:12]}, {placed.addr})"
        if avail == "drain":
            return f"{where} was drained: swarm shut the sandbox down"
        if nstate != "ready":
            return f"{where} is {nstate}: its engine does not answer"
        if task.get("DesiredState") != "running" or status.get("State") != "running":
            return f"its task on {where} is {status.get('State')} ({status.get('Err') or status.get('Message')})"
        try:
            state = self._node.api.inspect_container(placed.container_id)["State"]
        except Exception as e:
            return f"its container on {where} cannot be reached ({str(e)[:200]})"
        if not state.get("Running"):
            return f"its container on {where} stopped"
        return None

    def _gone(self, why: str | None = None) -> typing.NoReturn:
        """Raise SandboxGone naming the cause; the service is removed, so the next command starts a
        fresh sandbox, on whatever node swarm picks then."""
        why = why or self._why_gone() or "its engine stopped answering"
        where = self.placed.hostname if self.placed else "?"
        if self.placed is not None and self._node is not None:
            _lost[self.placed.node_id] = (time.monotonic(), self._node)
        with self._lock:
            self._remove()
            self.gone_reason = why
        raise SandboxGone(f"the swarm sandbox is gone: {why}; the next command starts a new one (node {where} "
                          "lost everything this sandbox held)")


class SwarmExecProcess(ExecProcess):
    """A docker exec on the node's engine; a sandbox that vanished under it is SandboxGone."""

    def __init__(self, executor: SwarmExecutor, *args) -> None:
        self.executor = executor
        super().__init__(*args)

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            code = super().wait(timeout)
        except Exception:  # the node's engine stopped answering
            code, self._gone = None, True
        if self._gone or (code is not None and code >= 128 and self.executor.placed is not None):
            # Killed by a signal: by the command's own doing, or because swarm is taking the
            # sandbox away (the task's desired state changes before its container stops, so the
            # manager is asked too, not only the container's state).
            why = self.executor._why_gone() if self.executor.placed else None
            if self._gone or why is not None or self.gone():
                self._gone = True
                self.executor._gone(why)
        return code

    def kill(self) -> None:
        if not self._gone:
            super().kill()


# -- connecting to a node's engine -------------------------------------------------------
_SSH_LOCK = threading.Lock()


def connect_engine(url: str, cfg: SwarmConfig):
    """A DockerClient for one node's engine: unix:// as is, tcp:// only with mutual TLS, ssh://
    only with the configured known_hosts (the user's ~/.ssh files are not consulted)."""
    from .docker.engine import connect, import_docker

    if url.startswith("unix://"):
        return connect(url)
    if url.startswith("tcp://"):
        if cfg.tls is None:
            raise InvalidConfig(f"engine {url}: tcp:// needs the swarm backend's tls (ca, cert, key); an engine's "
                                "plain TCP port is root on that node for anyone who reaches it")
        docker = import_docker()
        tls = docker.tls.TLSConfig(client_cert=(cfg.tls.cert, cfg.tls.key), ca_cert=cfg.tls.ca, verify=True)
        try:
            client = docker.DockerClient(base_url=url, tls=tls, timeout=120)
            client.ping()
        except Exception as e:
            raise EngineUnavailable(f"no Docker engine answers at {url}: {str(e)[:200]}") from None
        return client
    if url.startswith("ssh://"):
        if not cfg.known_hosts:
            raise InvalidConfig(f"engine {url}: ssh:// needs the swarm backend's known_hosts, the file holding that node's "
                                "host key")
        return _connect_ssh(url, cfg.known_hosts, cfg.ssh_key)
    raise InvalidConfig(f"engine {url}: use unix://, tcp:// (with tls) or ssh://")


def _connect_ssh(url: str, known_hosts: str, key_file: str | None):
    """docker-py's paramiko transport, configured here alone: host keys from `known_hosts` only
    (an unknown or changed key is refused), the given key, and none of the user's ~/.ssh files
    (their config could name a ProxyCommand, their known_hosts accept other keys)."""
    import urllib.parse

    from .docker.engine import import_docker

    docker = import_docker(ssh=True)
    import docker.api.client as api_client
    import paramiko
    from docker.transport.sshconn import SSHHTTPAdapter

    class Pinned(SSHHTTPAdapter):
        def _create_paramiko_client(self, base_url):
            u = urllib.parse.urlparse(base_url)
            self.ssh_client = paramiko.SSHClient()
            self.ssh_params = {"hostname": u.hostname, "port": u.port or 22, "username": u.username,
                               "key_filename": key_file, "look_for_keys": False, "allow_agent": key_file is None}
            self.ssh_client.load_host_keys(known_hosts)
            self.ssh_client.set_missing_host_key_policy(paramiko.RejectPolicy())

    with _SSH_LOCK:
        saved, api_client.SSHHTTPAdapter = api_client.SSHHTTPAdapter, Pinned
        try:
            client = docker.DockerClient(base_url=url, timeout=120)
            client.ping()
        except Exception as e:
            raise EngineUnavailable(f"no Docker engine answers at {url}: {str(e)[:200] or type(e).__name__}") from None
        finally:
            api_client.SSHHTTPAdapter = saved
    return client


# -- runner nodes / runner gc -------------------------------------------------------------
def nodes(manager) -> list[dict]:
    """Each node: hostname, id, role, state, availability, total and free cpus/memory (total minus
    the reservations of running tasks), and the runner sandboxes live on it."""
    api = manager.api
    tasks = [t for t in api.tasks(filters={"desired-state": "running"})]
    services = {s["ID"]: s for s in api.services(filters={"label": f"{L.MANAGED}=true"})}
    out = []
    for n in api.nodes():
        res = (n.get("Description") or {}).get("Resources") or {}
        cpu, mem = res.get("NanoCPUs", 0), res.get("MemoryBytes", 0)
        live = []
        for t in tasks:
            if t.get("NodeID") != n["ID"]:
                continue
            r = ((t.get("Spec") or {}).get("Resources") or {}).get("Reservations") or {}
            cpu -= r.get("NanoCPUs", 0)
            mem -= r.get("MemoryBytes", 0)
            svc = services.get(t.get("ServiceID"))
            if svc is not None:
                live.append(((svc.get("Spec") or {}).get("Labels") or {}).get(L.SESSION, "?"))
        out.append({"id": n["ID"], "hostname": (n.get("Description") or {}).get("Hostname", "?"),
                    "role": (n.get("Spec") or {}).get("Role", "?"), "state": (n.get("Status") or {}).get("State", "?"),
                    "availability": (n.get("Spec") or {}).get("Availability", "?"),
                    "addr": (n.get("Status") or {}).get("Addr", ""),
                    "cpus_free": cpu / 1e9, "memory_free": mem, "cpus": res.get("NanoCPUs", 0) / 1e9,
                    "memory": res.get("MemoryBytes", 0), "sandboxes": live})
    return out


def reap_orphans(client, dry_run: bool = False) -> list[tuple[str, str, str]]:
    """On a swarm manager: remove runner services whose owner is gone or whose time is up, then
    the sandbox networks no service uses any more. (short id, name, reason) of each."""
    swarm = client.info().get("Swarm") or {}
    if not swarm.get("ControlAvailable"):
        return []
    api, out = client.api, []
    for s in api.services(filters={"label": f"{L.MANAGED}=true"}):
        labels = (s.get("Spec") or {}).get("Labels") or {}
        reason = L.orphan_reason(labels)
        if reason is None:
            continue
        if not dry_run:
            try:
                api.remove_service(s["ID"])
            except Exception as e:
                if "not found" not in str(e).lower():
                    raise
        out.append((s["ID"][:12], (s.get("Spec") or {}).get("Name", "?"), f"service: {reason}"))
    live = {(s.get("Spec") or {}).get("Name") for s in api.services(filters={"label": f"{L.MANAGED}=true"})}
    for n in api.networks(filters={"label": f"{NETWORK}=true"}):
        if n["Name"] in live:
            continue
        reason = L.orphan_reason(n.get("Labels") or {}) or "its service is gone"
        if not dry_run:
            try:
                api.remove_network(n["Id"])
            except Exception:
                continue  # its container is still leaving its node; the next gc takes it
        out.append((n["Id"][:12], n["Name"], f"network: {reason}"))
    return out


EXECUTOR = SwarmExecutor  # what executors.get_executor("swarm") builds
