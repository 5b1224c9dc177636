"""The docker backend: each sandbox is an ephemeral, hardened container.

Lifecycles:
- per-session: `start()` creates one container (kept alive by a sleep loop under docker-init);
  each exec is a `docker exec` in it; `stop()` removes it.
- per-call: each exec creates a fresh container whose main process is the command, attached
  before it starts, and removes it afterwards (like `docker run --rm`).
"""
from __future__ import annotations

import os
import posixpath
import uuid
import threading
import time

from ..base import Executor, FailedProcess, Process, start_failure
from ..errors import EngineUnavailable, SandboxGone
from ..models import ExecRequest
from . import labels as L
from .config import SandboxConfig, create_kwargs
from .engine import connect, require_image, shared_client
from .process import PID_WRAPPER, ContainerProcess, EngineContainerProcess, ExecProcess

KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 3600; done"]

# Executors whose containers could not be removed when they stopped, because the engine did not
# answer (stopped or restarting): {engine address: {executor instance}}. The next executor of this
# process that reaches the same engine (start or stop) removes them, so a Runner that outlives an
# engine restart leaves no dead sandbox for `runner gc` once it has started or closed another.
_owed: dict[str, set[str]] = {}
_owed_lock = threading.Lock()


def _gone_or_going(e: Exception) -> bool:
    """A removal's error that means the container is gone, or being removed already (by another
    thread, or `runner gc`)."""
    return "No such container" in str(e) or "already in progress" in str(e)


def _remove_owed_on(client, engine: str) -> None:
    """Remove the containers owed on one engine (see _owed)."""
    with _owed_lock:
        owed = list(_owed.get(engine, ()))
    for instance in owed:
        if DockerExecutor._remove_all(client, instance):
            with _owed_lock:
                _owed.get(engine, set()).discard(instance)


def remove_owed() -> None:
    """Remove every container this process still owes an engine (see _owed), on each engine that
    answers now; what one that is still down holds stays for `runner gc`. A Runner calls it on close."""
    with _owed_lock:
        engines = [e for e, owed in _owed.items() if owed]
    for engine in engines:
        try:
            client = connect(engine or None, timeout=30)
        except EngineUnavailable:
            continue
        try:
            _remove_owed_on(client, engine)
        finally:
            client.close()


def _remove_quietly(container) -> None:
    """Remove a container docker-py made; what the engine will not remove now, stop() sweeps by
    this executor's label (or owes it to the engine)."""
    try:
        container.remove(force=True)
    except Exception:
        pass


class DockerExecutor(Executor):
    name = "docker"

    def __init__(self, config: SandboxConfig | None = None, *, base_url: str | None = None, client=None, **fields) -> None:
        if config is not None and fields:
            raise TypeError("give a SandboxConfig or its fields, not both")
        self.config = config or SandboxConfig(**fields)
        self.config.validate_mounts()
        self.base_url = base_url
        self.instance = uuid.uuid4().hex[:12]  # labels this executor's own containers
        self._client = client
        self._given_client = client is not None
        self._wire = None  # wire.Engine of a local engine, made at the first per-call container (False: none)
        self._given_info = None  # a given client's engine's info (runtime())
        self.container = None
        self._lock = threading.Lock()

    def wire_engine(self):
        """The engine over wire.py (standard library) when it is this machine's unix socket and no
        docker-py client was handed in; None where docker-py speaks to it (tcp://, ssh://)."""
        if self._wire is None:
            from .wire import Engine, socket_path

            path = None if self._given_client else socket_path(self.base_url)
            self._wire = False if path is None else Engine(path, self.base_url)
        return self._wire or None

    def runtime(self) -> str | None:
        """The OCI runtime of this executor's containers (runtimes.chosen): the config's, else crun
        where the engine offers it, else the engine's default (None)."""
        from .runtimes import chosen

        wire = self.wire_engine()
        if wire is not None:
            return chosen(self.config.runtime, self.engine, lambda: wire.json("GET", "/info"))
        if self._given_client:  # (its engine is the client's: asked once per executor)
            if self._given_info is None:
                self._given_info = self.client.info()
            return chosen(self.config.runtime, self._runtime_key(), lambda: self._given_info, cache=False)
        return chosen(self.config.runtime, self.engine, lambda: self.client.info())

    def _runtime_key(self) -> str:
        """The engine as runtimes keys it: its address, or a handed-in client's URL."""
        return f"client {self.client.api.base_url}" if self._given_client else self.engine

    def _under_runtime(self, start):
        """start(runtime) as runtimes.started runs it: under runtime(), else (that one could not
        start the container) under the engine's default. StartFailed: the engine would not."""
        from .runtimes import started

        return started(self.runtime(), self.config.runtime, self._runtime_key(), start)

    @property
    def client(self):
        if self._client is None:
            self._client = shared_client(self.base_url)
        return self._client

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def engine(self) -> str:
        return self.base_url or os.environ.get("DOCKER_HOST") or ""

    def start(self) -> None:
        """Reach the engine; a per-session executor also makes its container. Whether the image
        is there is asked only when a create fails (one round trip less on every start). A
        per-call executor on a local engine speaks wire.py: its first create reaches the engine."""
        with self._lock:
            if self.config.lifecycle == "per-call" and self.wire_engine() is not None:
                self._remove_owed(only_if_owed=True)
            else:
                self._remove_owed()  # also connects (once per process and engine address)
            if self.config.lifecycle == "per-session" and self.container is None:
                from .runtimes import StartFailed

                try:
                    self.container = self._under_runtime(self._started_session)
                except StartFailed as e:
                    raise e.error from None

    def stop(self) -> None:
        """Remove the session container and every other container of this executor: one an
        interrupt caught between its creation and its hand-over, or one the engine created and
        then would not start or attach (an engine shutting down still answers a create on a
        kept-alive connection, and refuses the next new one: such containers stay "Created")."""
        with self._lock:
            c, self.container = self.container, None
        removed = True
        if c is not None:
            try:
                c.remove(force=True)
            except Exception as e:
                removed = _gone_or_going(e)
        if self._wire:  # (its label sweep finds the SDK's containers of this instance too)
            from .oneshot import remove_instance

            removed = remove_instance(self._wire, self.instance) and removed
        elif self._client is not None:
            removed = self._remove_all(self._client, self.instance) and removed
        if not removed:
            with _owed_lock:
                _owed.setdefault(self.engine, set()).add(self.instance)
        elif self._client is not None or self._wire:
            self._remove_owed(only_if_owed=True)

    @staticmethod
    def _remove_all(client, instance: str) -> bool:
        """Remove every container of one executor instance of this process; False if the
        engine did not let us (then they are owed)."""
        mine = [f"{L.EXECUTOR}={instance}", f"{L.OWNER_PID}={os.getpid()}"]
        try:
            for left in client.api.containers(all=True, filters={"label": mine}):
                try:
                    client.api.remove_container(left["Id"], force=True)
                except Exception as e:
                    if not _gone_or_going(e):
                        raise
        except Exception:
            return False
        return True

    def _started_session(self, runtime: str | None):
        """The session's container, made and started under runtime (runtimes.started)."""
        import docker.errors

        from .runtimes import StartFailed

        c = self._create(KEEPALIVE, role="session", runtime=runtime)
        try:
            c.start()
            self._check_mounts(lambda: self.client.api.inspect_container(c.id), lambda: self.client.info())
        except docker.errors.APIError as e:
            _remove_quietly(c)
            raise StartFailed(e) from None
        except BaseException:
            _remove_quietly(c)
            raise
        return c

    def _check_mounts(self, inspect, info) -> None:
        """The mounts are the sources runner checked (mounts.check_if_here), else InvalidConfig
        (the caller removes the container)."""
        from .mounts import check_if_here
        from .runtimes import engine_info

        check_if_here(self.config.mounts, lambda: engine_info(self._runtime_key(), info), inspect)

    def _remove_owed(self, only_if_owed: bool = False) -> None:
        """Remove what this process owes this executor's engine (_owed). only_if_owed: reach the
        engine (docker-py) only when something is owed there."""
        if only_if_owed:
            with _owed_lock:
                if not _owed.get(self.engine):
                    return
        _remove_owed_on(self.client, self.engine)

    def _create_args(self, role: str, workdir: str | None = None, env=None, user=None,
                     own_init: bool = False, runtime: str | None = None) -> tuple[dict, dict]:
        """(container, host_config) arguments of one container (hardening.create_kwargs), for
        docker-py's create_container or wire.create_body alike. runtime: where the config names
        none (runtime(), as _under_runtime gives it)."""
        cfg = self.config
        labels = L.make_labels(cfg.session, cfg.ttl, role=role, extra={**cfg.labels, L.EXECUTOR: self.instance})
        kw, host = create_kwargs(cfg, labels, runtime)
        if own_init:
            host["init"] = False
        if workdir:
            kw["working_dir"] = workdir
        if env:
            kw["environment"] = {**kw["environment"], **env}
        if user:
            kw["user"] = user
        return kw, host

    def _create(self, cmd: list[str], role: str, stdin: bool = False, workdir: str | None = None, env=None, user=None,
                own_init: bool = False, runtime: str | None = None):
        cfg = self.config
        kw, host = self._create_args(role, workdir, env, user, own_init, runtime)
        # use_config_proxy: docker-py would add the proxies of the user's ~/.docker/config.json to
        # the environment, which holds only what the sandbox is given (wire.create_body adds none).
        readonly_paths = host.pop("readonly_paths", None)  # (docker-py's create_host_config has no such argument)
        host_config = self.client.api.create_host_config(**host)
        if readonly_paths is not None:
            host_config["ReadonlyPaths"] = readonly_paths
        kw.update(command=cmd, host_config=host_config, use_config_proxy=False)
        if stdin:
            kw["stdin_open"] = True  # with detach=False docker-py also sets StdinOnce
        import docker.errors

        try:
            created = self.client.api.create_container(**kw)
        except docker.errors.ImageNotFound:
            require_image(self.client, cfg.image)  # raises ImageNotFound saying how to get it
            raise
        # The model without an inspect round trip: only the id is needed until a reload.
        return self.client.containers.prepare_model({"Id": created["Id"]})

    def is_alive(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status == "running"

    # -- commands -----------------------------------------------------------------------
    def _cwd(self, cwd: str | None) -> str | None:
        """Relative working directories are resolved against the sandbox's workdir."""
        if not cwd or cwd.startswith("/"):
            return cwd
        return posixpath.join(self.config.workdir or "/", cwd)

    def spawn(self, req: ExecRequest) -> Process:
        if self.config.lifecycle == "per-call":
            return self._spawn_container(req)
        if self.container is None:
            self.start()
        return self._spawn_exec(req)

    def _spawn_exec(self, req: ExecRequest) -> ExecProcess:
        import docker.errors

        user = req.user or self.config.user
        started = time.time()
        try:
            ex = self.client.api.exec_create(
                self.container.id, PID_WRAPPER + req.argv, stdin=True, stdout=True, stderr=True,
                environment={**self.config.env, **req.env} or None, workdir=self._cwd(req.cwd) or self.config.workdir,
                user=user,
            )
            sock = self.client.api.exec_start(ex["Id"], socket=True)
        except docker.errors.NotFound:
            raise SandboxGone(f"sandbox container {self.container.short_id} is gone; start a new session") from None
        except docker.errors.APIError as e:
            if "is not running" in str(e):
                raise SandboxGone(f"sandbox container {self.container.short_id} is not running: {e.explanation}") from None
            raise
        return ExecProcess(self.client, self.container.id, ex["Id"], sock, user, started)

    def _not_started(self, req: ExecRequest, e) -> Process:
        """The engine would not start req's container (runtimes.StartFailed e): a FailedProcess for
        a user it cannot find (its message is not always there: told apart from an engine
        failure by looking), else the engine's error raised."""
        failure = self.diagnose_start(req) if req.user else None
        if failure is None and "unable to find user" in str(e.error):
            failure = start_failure("unknown-user", req.model_copy(update={"user": req.user or self.config.user}))
        if failure is None:
            raise e.error from None
        return FailedProcess(failure)

    def _spawn_container(self, req: ExecRequest) -> Process:
        engine = self.wire_engine()
        if engine is not None:
            return self._spawn_container_wire(engine, req)
        import docker.errors

        from .runtimes import StartFailed

        started = time.time()

        def make(runtime):
            c = self._create(req.argv, role="call", stdin=True, workdir=self._cwd(req.cwd), env=req.env, user=req.user,
                             own_init=req.own_init, runtime=runtime)
            try:
                sock = self.client.api.attach_socket(c.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                try:
                    c.start()
                    self._check_mounts(lambda: self.client.api.inspect_container(c.id), lambda: self.client.info())
                except docker.errors.APIError as e:
                    sock.close()
                    raise StartFailed(e) from None
                except BaseException:
                    sock.close()
                    raise
            except BaseException:
                _remove_quietly(c)  # (else stop() sweeps this executor's label, or owes it to the engine)
                raise
            return c, sock

        try:
            c, sock = self._under_runtime(make)
        except StartFailed as e:
            return self._not_started(req, e)
        try:
            return ContainerProcess(c, sock, started)
        except BaseException:
            sock.close()
            _remove_quietly(c)
            raise

    def _spawn_container_wire(self, engine, req: ExecRequest) -> Process:
        """_spawn_container over wire.py: create (attached, stdin open), attach, start; the same
        container (create_body of the same arguments) and the same failures."""
        from .engine import image_missing
        from .oneshot import remove_container
        from .runtimes import StartFailed
        from .wire import EngineRefused, create_body

        started = time.time()

        def make(runtime):
            kw, host = self._create_args("call", self._cwd(req.cwd), req.env, req.user, req.own_init, runtime)
            try:
                cid = engine.json("POST", "/containers/create", create_body(kw, host, req.argv, stdin_open=True))["Id"]
            except EngineRefused as e:
                if e.status == 404 and "image" in e.message.lower():
                    raise image_missing(self.config.image) from None
                raise
            try:
                sock, early = engine.hijack(f"/containers/{cid}/attach?stream=1&stdin=1&stdout=1&stderr=1")
            except BaseException:
                remove_container(engine, cid)  # (stop() sweeps this executor's label, or owes it to the engine)
                raise
            try:
                engine.json("POST", f"/containers/{cid}/start")
            except BaseException as e:  # (an interrupt, the engine gone)
                sock.close()
                remove_container(engine, cid)
                if isinstance(e, EngineRefused):
                    raise StartFailed(e) from None
                raise
            try:
                self._check_mounts(lambda: engine.json("GET", f"/containers/{cid}/json"),
                                   lambda: engine.json("GET", "/info"))
            except BaseException:
                sock.close()
                remove_container(engine, cid)
                raise
            return cid, sock, early

        try:
            cid, sock, early = self._under_runtime(make)
        except StartFailed as e:
            return self._not_started(req, e)
        try:
            return EngineContainerProcess(engine, cid, sock, early, started)
        except BaseException:  # (no thread for the reader, an interrupt)
            sock.close()
            remove_container(engine, cid)
            raise
