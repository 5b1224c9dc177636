"""The docker backend: a hardened container per sandbox, the workspace bind-mounted at /workspace.

Protected paths are read-only mounts on top of the workspace (the kernel refuses writes, even
from bash); this machine's tool folders are mounted read-only under /opt/runner-tools; in
allowlist mode the session's sandboxes sit on an internal network behind an egress proxy.
A backend that runs the same containers elsewhere (a cluster) subclasses DockerPlacement and
overrides `executor()`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from ..errors import RunnerError
from .base import BackendConfig, Placement, Setting, ToolFolder

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_TOOLS = "/opt/runner-tools"
SANDBOX_ENV = {"HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class DockerBackend(BackendConfig):
    type: Literal["docker"] = "docker"
    egress_network: Optional[str] = Field(default=None, description="an existing network for the egress proxy's "
                                          "way out (allowlist mode); default: one of the session's own")

    def placement(self, setting: Setting) -> "DockerPlacement":
        return DockerPlacement(self, setting)

    @classmethod
    def collects_garbage(cls) -> bool:
        return True

    @classmethod
    def collect_garbage(cls, host: str | None, dry_run: bool) -> list[tuple[str, str, str]]:
        return collect_garbage(host, dry_run)


class DockerPlacement(Placement):
    config: DockerBackend

    def __init__(self, config: DockerBackend, setting: Setting) -> None:
        super().__init__(config, setting)
        self.egress = None  # executors.docker.egress.Egress in allowlist mode, once open()
        self._scanned: set[str] = set()  # the operator's mount sources already looked through

    @property
    def workspace(self) -> str:
        return SANDBOX_WORKSPACE

    def warnings(self) -> list[str]:
        """The sandbox runs as the workspace's owner (config()): root, for a workspace root owns."""
        if self.setting.workspace.stat().st_uid != 0:
            return []
        return [f"workspace {self.setting.workspace} is owned by root, so the sandbox's processes run as root "
                "(uid 0, still with no capabilities, no-new-privileges, seccomp and a read-only root): give runner "
                "a workspace an unprivileged user owns, and the sandbox runs as that user"]

    @property
    def tools_root(self) -> str:
        return SANDBOX_TOOLS

    def host_path(self, path: str) -> str:
        if path == SANDBOX_WORKSPACE or path.startswith(SANDBOX_WORKSPACE + "/"):
            return str(self.setting.workspace) + path[len(SANDBOX_WORKSPACE):]
        return path

    def sandbox_view(self, host: Path) -> Optional[str]:
        ws = self.setting.workspace
        if host.is_relative_to(ws):
            return self.in_sandbox(host.relative_to(ws).as_posix())
        return None

    def roots(self) -> list[dict]:
        return [{"path": m.target, "read_only": m.mode == "ro"} for m in self.setting.policy.mounts]

    # -- what the session holds ---------------------------------------------------------
    def check(self, protected: list[str]) -> None:
        from ..untrusted.wspath import UnsafePath

        try:  # refuse a workspace whose protected paths cannot be held, before any sandbox
            self.protection_mounts(protected)
        except (UnsafePath, OSError) as e:
            raise RunnerError(f"cannot start sandboxes on the workspace {self.setting.workspace}: {e}") from None

    def open(self) -> None:
        """Allowlist mode: the session's internal network, egress proxy and host firewall."""
        pol = self.setting.policy
        if self.egress is not None or pol.network.mode != "allowlist":
            return
        from executors.docker.egress import Egress
        from executors.docker.engine import connect

        eg = Egress(connect(), self.setting.session_id, allow=list(pol.network.allow),
                    labels={"runner.tenant": pol.tenant or ""}, image=pol.sandbox.image,
                    outside_network=self.config.egress_network)
        eg.start()
        self.egress = eg

    def frozen(self):
        from ..host.freeze import frozen

        return frozen(self.setting.session_id)

    def close(self) -> None:
        # Sandboxes that died with their engine (stopped, restarted) could not be removed then:
        # removed now if the engine answers again (executors/docker/executor.py: remove_owed).
        from executors.docker.executor import remove_owed

        remove_owed()
        if self.egress is not None:  # after every sandbox on its network is gone
            from ..controller import finisher

            finisher.wait()  # (those a closing Runner left to it)
            self.egress.stop()

    # -- the sandbox ----------------------------------------------------------------------
    def require_engine(self, lifecycle: str) -> None:
        if lifecycle == "per-call":  # a per-session Runner found out when it started
            from executors.docker.wire import Engine, socket_path

            path = socket_path()
            if path is None:  # tcp://, ssh://: docker-py's
                from executors.docker.engine import connect

                connect().close()
            else:  # (EngineUnavailable when nothing answers there)
                Engine(path).request("GET", "/_ping", timeout=30)

    def remove_sandboxes(self) -> None:
        from executors.docker.engine import connect

        client = connect()
        try:
            for c in client.api.containers(all=True, filters={"label": self._agents()}):
                client.api.remove_container(c["Id"], force=True)
        finally:
            client.close()

    def _agents(self) -> list[str]:
        """Label filters of this session's agent sandboxes made by this process."""
        from executors.docker import labels as L

        return [f"{L.SESSION}={self.setting.session_id}", f"{L.OWNER_PID}={os.getpid()}", f"{L.ROLE}=agent"]

    def protection_mounts(self, protected: list[str]) -> list:
        """The read-only mounts of the protected paths and the pins that keep them and their
        ancestors (and the workspace's policy mount sources) where they are. Missing protected
        paths the user listed, and .git/hooks of a repository, are made first. Raises UnsafePath
        when a link stands on the way (never followed)."""
        import stat

        from ..policy.protect import GIT_HOOKS, mount_plan, protected_dirs

        pol, ws = self.setting.policy, self.setting.workspace
        st = ws.stat()
        create = protected_dirs(pol.protect, git_hooks=False, workspace=ws)
        try:
            if pol.protect_git_hooks and stat.S_ISDIR(os.lstat(ws / ".git").st_mode):
                create.append(GIT_HOOKS)
        except FileNotFoundError:
            pass
        pins = [rel for m in pol.mounts if (rel := m.workspace_rel(ws))]
        plan = mount_plan(ws, SANDBOX_WORKSPACE, protected, create=create, pin=pins,
                          pins_read_only=pol.sandbox.workspace == "ro", owner=(st.st_uid, st.st_gid))
        return [m.to_mount() for m in plan.mounts]

    def sandbox_config(self, protected: list[str], tools: list[ToolFolder]):
        """The executors SandboxConfig of one sandbox of this session."""
        from executors.docker import Mount, SandboxConfig

        pol, ws = self.setting.policy, self.setting.workspace
        st = ws.stat()
        mounts = [Mount(source=str(ws), target=SANDBOX_WORKSPACE, read_only=pol.sandbox.workspace == "ro", scan=False)]
        mounts += self.protection_mounts(protected)
        mounts += [self._scan_once(m.to_mount(ws)) for m in pol.mounts]
        mounts += [self._scan_once(Mount(source=str(t.host), target=t.sandbox, read_only=True)) for t in tools]
        mounts = [_with_identity(m, ws) for m in mounts]
        net = {"network": "none", "env": dict(SANDBOX_ENV)}
        if self.egress is not None:
            net = {"network": self.egress.sandbox_network, "dns": self.egress.sandbox_dns,
                   "env": {**SANDBOX_ENV, **self.egress.proxy_env}}
        return SandboxConfig(image=pol.sandbox.image, limits=pol.limits.sandbox_limits(), mounts=mounts,
                             user=f"{st.st_uid}:{st.st_gid}", workdir=SANDBOX_WORKSPACE, runtime=pol.sandbox.runtime,
                             lifecycle="per-call", session=self.setting.session_id, labels=self.labels(), **net)

    def labels(self) -> dict[str, str]:
        """Labels of the sandboxes: a tenant's carry runner.tenant=NAME (runner serve finds them by it)."""
        tenant = self.setting.policy.tenant
        return {"runner.role": "agent", **({"runner.tenant": tenant} if tenant else {})}

    def _scan_once(self, mount):
        """An operator's directory (a policy mount, a tool folder) is looked through for sockets
        and devices (up to 20,000 entries) once per session, not at every sandbox's creation:
        checked here the first time (InvalidConfig, as the executor would say), then mounted
        with scan off. Sources in the workspace are never scanned (their contents are the
        sandbox's own); the other checks (root, /proc, a socket itself) run every time."""
        from executors.docker.config import check_mount

        if not mount.scan:
            return mount
        if mount.source not in self._scanned:
            check_mount(mount)
            self._scanned.add(mount.source)
        return mount.model_copy(update={"scan": False})

    def executor(self, cfg):
        """The executor of one sandbox (a cluster backend returns its own from the same config)."""
        from executors.docker import DockerExecutor

        return DockerExecutor(cfg)

    def direct_channel(self, cfg) -> bool:
        """Whether the agent can reach a socket of this machine (runner/controller/channel.py); a cluster
        backend, whose sandboxes run on other machines, says no."""
        from ..controller import channel

        return channel.usable(os.environ.get("DOCKER_HOST", ""), cfg.runtime)

    def make_sandbox(self, hello: dict, protected: list[str], tools: list[ToolFolder]):
        from ..controller.sandbox import Sandbox

        cfg = self.sandbox_config(protected, tools)
        hello = {**hello, "workspace": SANDBOX_WORKSPACE, "protected": [self.in_sandbox(p) for p in protected],
                 "roots": self.roots()}
        if self.egress is not None:
            hello["proxy"] = self.egress.proxy_url
        if not self.direct_channel(cfg):
            return Sandbox(self.executor(cfg), hello, cwd=SANDBOX_WORKSPACE)
        from executors.docker import Mount

        from ..controller import channel

        listener = channel.Listener(tuple(int(x) for x in cfg.user.split(":")))
        engine = os.environ.get("DOCKER_HOST", "")

        def on_stdio():  # the engine could not mount the directory: offer it no socket again
            channel.refuse(engine)
            return self.executor(cfg)

        try:
            with_socket = cfg.model_copy(update={"mounts": [*cfg.mounts, Mount(
                source=listener.dir, target=channel.SANDBOX_DIR, read_only=True, scan=False)]})
            return Sandbox(self.executor(with_socket), {**hello, "channel": channel.SANDBOX_PATH},
                           cwd=SANDBOX_WORKSPACE, listener=listener, stdio_executor=on_stdio)
        except BaseException:
            listener.close()
            raise


def _with_identity(mount, ws):
    """A mount whose source is the workspace or in it, with the identity it has now, reached from
    the workspace with no link followed (the executor refuses a container where the engine
    mounted another: executors/docker/mounts.py, identity). UnsafePath for a link on the way."""
    from executors.docker.mounts import identity

    from ..untrusted.wspath import UnsafePath, relative

    rel = relative(ws, mount.source)
    if rel is None:
        return mount
    try:
        return mount.model_copy(update={"identity": identity(str(ws), rel)})
    except OSError as e:
        raise UnsafePath(f"mount source {rel or '.'} of the workspace: {e.strerror or e}; the controller does not "
                         "follow links in the workspace") from None


# -- runner gc: what dead processes left on the engine ------------------------------------
def collect_garbage(host: str | None = None, dry_run: bool = False) -> list[tuple[str, str, str]]:
    """Orphaned runner containers and their egress networks on the engine, and serve's shared
    networks nothing uses any more (`runner gc`)."""
    from executors.docker import labels as L
    from executors.docker.engine import connect

    client = connect(host)
    removed = []
    for c in managed(client):
        reason = L.orphan_reason(c["Labels"])
        if reason is None:
            continue
        if not dry_run:
            try:
                client.api.remove_container(c["Id"], force=True)
            except Exception as e:  # removed meanwhile, or being removed, by its owner or another gc
                if "No such container" not in str(e) and "already in progress" not in str(e):
                    raise
        removed.append((c["Id"][:12], (c.get("Names") or ["?"])[0].lstrip("/"), reason))
    from executors.docker.egress import reap_orphans

    removed += [(what, "egress", reason) for what, reason in reap_orphans(client, dry_run=dry_run)]
    removed += _reap_shared_networks(client, dry_run)
    return removed


SHARED_NETWORK_ROLES = ("tenant-network",)  # runner serve's per-tenant egress networks


def _reap_shared_networks(client, dry_run: bool) -> list[tuple[str, str, str]]:
    """Networks a dead process made for several sessions (runner serve's per-tenant ones, killed
    and never restarted), once nothing uses them: one still in use (another instance's proxy
    on it) is kept; its user removes it."""
    from executors.docker import labels as L

    out = []
    for net in client.api.networks(filters={"label": f"{L.MANAGED}=true"}):
        labels = net.get("Labels") or {}
        reason = L.orphan_reason(labels) if labels.get(L.ROLE) in SHARED_NETWORK_ROLES else None
        if reason is None:
            continue
        if not dry_run:
            try:
                client.api.remove_network(net["Id"])
            except Exception as e:
                if "active endpoints" in str(e) or "No such network" in str(e) or "not found" in str(e):
                    continue
                raise
        out.append((net["Id"][:12], net["Name"], reason))
    return out


def managed(client) -> list[dict]:
    """runner's containers, from one list request (no per-container inspect to race with)."""
    from executors.docker import labels as L

    return client.api.containers(all=True, filters={"label": f"{L.MANAGED}=true"})
