"""The docker backend: a hardened container per sandbox, the workspace bind-mounted at /workspace.

Protected paths are read-only mounts on top of the workspace (the kernel refuses writes, even
from bash); this machine's tool folders are mounted read-only under /opt/runner-tools; in
allowlist mode the session's sandboxes sit on an internal network behind an egress proxy.
A backend that runs the same containers elsewhere (a cluster) subclasses DockerPlacement and
overrides `executor()`.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
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

    # -- the engine itself (runner images, the command line's errors) ---------------------
    @staticmethod
    def client(host: str | None = None):
        """A Docker SDK client of the engine at `host` (None: DOCKER_HOST's), for what works on the
        engine as such (runner/cli/images.py builds and lists runner's images with it). Raises
        EngineUnavailable."""
        from executors.docker.engine import connect

        return connect(host)

    @staticmethod
    def refusal(error: BaseException) -> str | None:
        """What the engine said, when `error` is its refusal (an API error of the Docker SDK), as
        the command line reports it; else None. Raises nothing."""
        import sys

        errors = sys.modules.get("docker.errors")  # an error of the SDK means the SDK is loaded
        if errors is None or not isinstance(error, errors.APIError):
            return None
        return f"the Docker engine refused: {error.explanation or error}"

    # -- runner doctor ------------------------------------------------------------------
    @staticmethod
    def engine_status(host: str | None, image_listing) -> list[tuple[str, str, str]]:
        """`runner doctor`'s rows (OK|WARN|FAIL, what, detail) for the engine at `host`: its
        version, seccomp, runtimes (the one sandboxes use, tried), docker-init, the images
        (`image_listing(client)`: runner/cli/images.py) and orphaned containers. One FAIL row
        `engine` when it does not answer. Raises nothing else of its own."""
        import shutil

        from executors.docker import labels as L
        from executors.docker.engine import connect
        from executors.errors import EngineUnavailable

        rows: list[tuple[str, str, str]] = []
        try:
            client = connect(host)
        except EngineUnavailable as e:
            return [("FAIL", "engine", str(e))]
        info = client.info()
        rows.append(("OK", "engine", f"Docker {info.get('ServerVersion')} ({info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')})"))
        sec = " ".join(info.get("SecurityOptions") or [])
        rows.append(("OK" if "seccomp" in sec else "FAIL", "seccomp",
                     "default profile available" if "seccomp" in sec else "the engine has no seccomp: rebuild it with seccomp support"))
        runtimes = sorted((info.get("Runtimes") or {}).keys())
        rows.append(("OK", "runtimes", ", ".join(runtimes)))
        from executors.docker.runtimes import PREFERRED, RUNC, pick

        picked, default = pick(info), info.get("DefaultRuntime") or "runc"
        if picked:
            rows.append(_runtime_row(client, picked, default))
        elif default not in RUNC:
            rows.append(("OK", "sandbox runtime", f"the engine's default, {default}"))
        else:
            rows.append(("WARN", "sandbox runtime", f"the engine's default, {default}: register {PREFERRED} for "
                         "faster starts (scripts/setup.sh does)"))
        if "runsc" not in runtimes:
            rows.append(("WARN", "gVisor", "runsc is not configured: apt-get install runsc, then add it to "
                         "/etc/docker/daemon.json runtimes with --platform=ptrace --network=none and restart dockerd"))
        rows.append(("OK" if info.get("InitBinary") or shutil.which("docker-init") else "WARN", "init",
                     info.get("InitBinary") or "no docker-init: --init will fail (apt-get install tini)"))
        for r in image_listing(client):
            if r["state"] == "ok":
                rows.append(("OK", f"image {r['name']}", f"{r['id']} {r['size_mb']}MB"))
            else:
                rows.append(("WARN" if r.get("optional") else "FAIL", f"image {r['name']}",
                             f"{r['state']}: run `runner images build`" + (" (optional)" if r.get("optional") else "")))
        stale = [c for c in managed(client) if L.orphan_reason(c["Labels"])]
        rows.append(("WARN" if stale else "OK", "orphans", f"{len(stale)} orphaned container(s)" + (": run `runner gc`" if stale else "")))
        return rows

    # -- sandboxes made from a config of their own (the inspect provider) --------------------
    @staticmethod
    def container_config(mounts: list[tuple], **fields):
        """An executors SandboxConfig (the hardened defaults, `fields` over them) with these
        (host source, sandbox target[, read_only]) bind mounts, read-write unless said. Raises
        pydantic's ValidationError (a ValueError) for a bad field."""
        from executors.docker import Mount, SandboxConfig

        return SandboxConfig(**fields, mounts=[Mount(source=m[0], target=m[1], read_only=bool(m[2:] and m[2]))
                                               for m in mounts])

    @staticmethod
    def make_executor(cfg):
        """The docker executor of one sandbox from an executors SandboxConfig (not started).
        Raises InvalidConfig for a mount it refuses."""
        from executors.docker import DockerExecutor

        return DockerExecutor(cfg)

    @staticmethod
    def exec_attached(ex, argv: list[str], env: dict[str, str], workdir: str, user: str):
        """A command in a started per-session executor's container (runner serve's E2B sandboxes),
        its stdin and its multiplexed output on one socket: (the socket, a reader of its frames)."""
        from executors.docker.process import _raw
        from executors.docker.wire import Frames

        api = ex.client.api
        made = api.exec_create(ex.container.id, argv, stdin=True, stdout=True, stderr=True, environment=env,
                               workdir=workdir, user=user)
        sock = _raw(api.exec_start(made["Id"], socket=True))
        return sock, Frames(sock)

    @staticmethod
    def stats(ex) -> dict:
        """The engine's one sample of a started per-session executor's container (cpu, memory)."""
        return ex.client.api.stats(ex.container.id, stream=False)

    @staticmethod
    def require_image(image: str) -> None:
        """Raise ImageNotFound (saying how to get it) unless the engine has `image`; EngineUnavailable
        when it does not answer."""
        from executors.docker.engine import connect, require_image

        require_image(connect(), image)

    # -- one command in a fresh sandbox (runner serve's /v1/exec, `runner exec` on a remote engine)
    @staticmethod
    def one_shot(cfg, req, base_url: str | None = None, **exec_kwargs):
        """Run `req` (an ExecRequest, or a function that makes it: called after the engine and the
        image were checked, so their errors come first) in one hardened sandbox made from `cfg` (an
        executors SandboxConfig, per-call) on the engine at `base_url` (None: DOCKER_HOST's),
        removed after; `exec_kwargs` go to Executor.exec (stdin, on_output, cancel). Returns the
        ExecResult. Raises EngineUnavailable, ImageNotFound, ExecCancelled (cancel set), another
        ExecutorError, or what making the request raises."""
        from executors.docker import DockerExecutor

        ex = DockerExecutor(cfg, base_url=base_url)
        ex.start()  # checks engine and image; per-call creates nothing yet
        request = req() if callable(req) else req
        try:
            return ex.exec(request, **exec_kwargs)
        finally:
            ex.stop()

    # -- sandboxes by label (runner serve, the inspect provider) ----------------------------
    @staticmethod
    def sandboxes(labels: dict[str, str | None]) -> list[dict]:
        """runner's containers on the engine carrying these labels (None: any value), from one
        list request: the engine's records ({"Id", "Labels", ...}). Raises EngineUnavailable, or
        the engine's error."""
        from executors.docker.engine import connect

        filt = ["runner.managed=true"] + [k if v is None else f"{k}={v}" for k, v in labels.items()]
        return connect().api.containers(all=True, filters={"label": filt})

    @staticmethod
    def remove_sandbox(cid: str) -> None:
        """Force-remove container `cid`. Raises EngineUnavailable, or the engine's error (also for
        one gone or being removed already)."""
        from executors.docker.engine import connect

        connect().api.remove_container(cid, force=True)

    @staticmethod
    def orphan_reason(labels: dict[str, str]) -> str | None:
        """Why the runner process that made a container (its labels) is gone, or None while it
        lives and the container has not outlived its ttl. Raises nothing."""
        from executors.docker.labels import orphan_reason

        return orphan_reason(labels)

    @staticmethod
    def reap_egress(sessions: set[str]) -> None:
        """Remove the egress (proxy, networks, firewall rules) of these sessions whose owner process
        is gone, as `runner gc` does, and nothing of any other session. Raises EngineUnavailable,
        or the engine's error."""
        from executors.docker.egress import reap_orphans
        from executors.docker.engine import connect

        reap_orphans(connect(), only=sessions)

    # -- runner serve's per-tenant egress networks ----------------------------------------
    @staticmethod
    def tenant_network(tenant: str, name: str) -> None:
        """Make the bridge network `name` for `tenant`'s egress proxies, labelled runner.tenant=TENANT
        (and as a shared network `runner gc` removes once its maker is dead and nothing uses it),
        unless one of exactly that name exists. Raises EngineUnavailable."""
        from executors.docker import labels as L
        from executors.docker.engine import connect

        client = connect()
        # The engine's name filter matches substrings ("runner-tenant-X" finds "runner-tenant-X-eu"):
        # only a network of exactly this name is this tenant's.
        if not any(n.get("Name") == name for n in client.api.networks(names=[name])):
            labels = L.make_labels(f"tenant-{tenant}", 10 * 365 * 86400, role="tenant-network",
                                   extra={"runner.tenant": tenant})
            try:  # the engine checks the name as it makes it: another instance may have made it since
                client.api.create_network(name, driver="bridge", internal=False, labels=labels, check_duplicate=True)
            except Exception as e:
                if getattr(getattr(e, "response", None), "status_code", None) != 409:
                    raise

    @staticmethod
    def remove_networks(names: list[str]) -> list[tuple[str, str]]:
        """Remove these networks; (name, why) of each kept (in use by another instance's proxy: it
        removes it later). Raises EngineUnavailable."""
        from executors.docker.engine import connect

        client = connect()
        kept = []
        for name in names:
            try:
                client.api.remove_network(name)
            except Exception as e:
                kept.append((name, str(e)))
        return kept


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

        broker = self.setting.broker
        eg = Egress(connect(), self.setting.session_id, allow=list(pol.network.allow),
                    labels={"runner.tenant": pol.tenant or ""}, image=pol.sandbox.image,
                    outside_network=self.config.egress_network,
                    broker=broker.proxy_entries() if broker else None,
                    tls_ca=broker.tls_ca(pol, self.setting.workspace) if broker else None,
                    on_event=self.setting.on_egress)
        eg.start()
        self.egress = eg

    def update_network(self, policy) -> None:
        """The proxy takes the new allowlist and brokered hosts for its next connections."""
        from ..errors import RunnerError

        if self.egress is None:
            raise RunnerError("this session has no egress proxy (network mode none, or not started yet)")
        broker = self.setting.broker
        entries = None
        if broker:
            broker.with_hosts(policy)
            entries = broker.proxy_entries()
        self.egress.update(allow=list(policy.network.allow), broker=entries,
                           tls_ca=broker.tls_ca(policy, self.setting.workspace) if broker else None)

    def frozen(self):
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
        return [protected_mount(m) for m in plan.mounts]

    def sandbox_config(self, protected: list[str], tools: list[ToolFolder]):
        """The executors SandboxConfig of one sandbox of this session."""
        from executors.docker import Mount, SandboxConfig

        pol, ws = self.setting.policy, self.setting.workspace
        st = ws.stat()
        mounts = [Mount(source=str(ws), target=SANDBOX_WORKSPACE, read_only=pol.sandbox.workspace == "ro", scan=False)]
        mounts += self.protection_mounts(protected)
        mounts += [self._scan_once(policy_mount(m, ws)) for m in pol.mounts]
        mounts += [self._scan_once(Mount(source=str(t.host), target=t.sandbox, read_only=True)) for t in tools]
        mounts = [_with_identity(m, ws) for m in mounts]
        net = {"network": "none", "env": dict(SANDBOX_ENV)}
        if self.egress is not None:
            net = {"network": self.egress.sandbox_network, "dns": self.egress.sandbox_dns,
                   "env": {**SANDBOX_ENV, **self.egress.proxy_env}}
            mounts += self.egress.sandbox_mounts()  # the session CA of brokered secrets (no key)
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
        return DockerBackend.make_executor(cfg)

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


@contextmanager
def frozen(session: str):
    """Pause this session's running sandbox containers (not its egress proxy) until the block ends.

    host-shell checks the repository and then starts git, which reads `.git/config` (and hooks,
    attributes, refs) again, later, by path. A process left running in the sandbox could swap in
    a configuration that names a program between the check and the read. Pausing the session's
    sandbox containers (the cgroup freezer) for the length of the host command closes that window;
    they are resumed whatever happens. Raises ExecutorError when a running one cannot be paused."""
    from executors import ExecutorError
    from executors.docker import labels as L
    from executors.docker.engine import connect

    client = connect()
    paused = []
    try:
        for c in client.containers.list(filters={"label": f"{L.SESSION}={session}", "status": "running"}):
            if c.labels.get(L.ROLE, "").startswith("egress"):
                continue
            try:
                c.pause()
                paused.append(c)
            except Exception as e:
                if _still_running(c):  # fail closed: no host command next to a sandbox that runs
                    raise ExecutorError(f"could not pause the sandbox while the host command runs: {e}") from None
                # a per-call container that ended (and is being removed) meanwhile: nothing runs there
        yield paused
    finally:
        for c in paused:
            try:
                c.unpause()
            except Exception:  # gone meanwhile: nothing left to resume
                pass
        client.close()


def _still_running(container) -> bool:
    try:
        container.reload()
    except Exception:  # removed
        return False
    return container.status in ("running", "restarting")


def _runtime_row(client, picked: str, default: str) -> tuple[str, str, str]:
    """The runtime runner picks for sandboxes, tried: one hardened sandbox of the default image
    runs `true` under it, and where that fails, under the engine's default too (a runtime listed
    but unable to run here is given up by each process only after a failed start:
    executors/docker/runtimes.py)."""
    import time

    from executors.docker.config import SandboxConfig

    image = SandboxConfig().image
    try:
        client.images.get(image)
    except Exception:
        return ("OK", "sandbox runtime", f"{picked} (not tried: no image {image} yet): sandboxes whose policy names "
                "no runtime use it")
    t = time.monotonic()
    why = _try_runtime(client, picked)
    if why is None:
        return ("OK", "sandbox runtime", f"{picked}: ran a hardened sandbox in {(time.monotonic() - t) * 1000:.0f} ms; "
                "sandboxes whose policy names no runtime use it")
    if _try_runtime(client, default) is not None:
        return ("WARN", "sandbox runtime", f"{picked}: no hardened sandbox ran under it nor under the engine's default, "
                f"{default} ({why}): not the runtime's doing; see the rows below")
    return ("WARN", "sandbox runtime", f"{picked} is listed but could not run a sandbox here ({why}); each process "
            f"falls back to the engine's default, {default}, after one failed start: remove {picked} from the "
            "engine's runtimes, or name a runtime in the policy (sandbox.runtime)")


def _try_runtime(client, runtime: str) -> str | None:
    """None if one hardened sandbox ran `true` under runtime within 30 s, else what went wrong."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    try:
        with DockerExecutor(client=client, lifecycle="per-call", runtime=runtime) as ex:
            res = ex.exec(ExecRequest(argv=["true"], timeout=30))
    except Exception as e:
        return str(e)[:400]
    if res.exit_code == 0:
        return None
    return ("timed out after 30 s" if res.timed_out else
            f"`true` exited {res.exit_code}: {res.stderr.decode(errors='replace').strip()[:300]}")


def policy_mount(m, workspace) -> "object":
    """An executors Mount of a policy's mount (runner.policy.model.MountSpec). A source in the
    workspace is not scanned for sockets: its contents are the sandbox's own. Raises nothing."""
    from executors.docker.config import Mount

    return Mount(source=str(m.host_path(workspace)), target=m.target, read_only=m.mode == "ro",
                 scan=m.workspace_rel(workspace) is None)


def protected_mount(p) -> "object":
    """An executors Mount of a protected path's mount or pin (runner.policy.protect.ProtectedMount).
    The source is a workspace path: its contents are the sandbox's own, not scanned for sockets."""
    from executors.docker.config import Mount

    return Mount(source=p.host, target=p.container, read_only=p.read_only, scan=False)


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


def engine_on_this_machine(engine: str, info: dict | None = None) -> bool | None:
    """Whether the engine at `engine` (DOCKER_HOST's value, "" for the default) runs its
    containers on this very machine (runner/controller/channel.py), from its `docker info`: `info`,
    or asked over a unix socket with the standard library (no docker-py on a sandbox's path),
    once per engine address and process. None when it cannot say. Raises nothing."""
    from executors.docker.runtimes import on_this_machine

    if info is None:
        try:
            from executors.docker.runtimes import engine_info
            from executors.docker.wire import Engine, socket_path

            wire = Engine(socket_path(engine or None), engine or None)
            info = engine_info(engine, lambda: wire.json("GET", "/info"))
        except Exception:
            return None
    return on_this_machine(info)


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


CONFIG = DockerBackend  # this module's backend (runner/backends/__init__.py lists the package)
