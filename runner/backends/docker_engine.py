"""The docker backend's standard-library half: what `runner exec` (one-shot and detached runs:
`runner ps`, `logs`, `stop`, `attach`) and `runner images` do on a Docker engine.

runner/backends/docker.py is the backend as a Runner uses it: a pydantic config and its
placement. `runner exec` on the local engine never loads pydantic (nor the Docker SDK): it drives
the engine over its unix socket (executors/docker/wire.py), one round trip per step. This module
holds that path, so that the command line names no module of executors.docker and the Docker SDK
(issue 44: no module outside the docker executor and the docker backend imports them); importing
it loads nothing beyond the standard library and runner.errors, and each function imports what it
drives when it is called. It is no backend of its own (runner/backends/__init__.py's listing
leaves it out).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable

from ..errors import RunnerError, UsageError

# -- the sandbox `runner exec` asks for ----------------------------------------------------------
def plain_config(o) -> SimpleNamespace:
    """The sandbox `o` (runner.cli.exec_cmd.ExecOptions) asks for, checked, as a SandboxConfig's
    fields on a plain object: standard library only (the local engine's path never loads
    pydantic). Raises UsageError."""
    from executors.defaults import DEFAULT_IMAGE, parse_size
    from executors.docker.hardening import DEFAULTS, check_tmpfs, device_request
    from executors.docker.mounts import check_mount, parse_mount
    from executors.errors import InvalidConfig

    if o.stop_timeout < 0:
        raise UsageError(f"bad --stop-timeout {o.stop_timeout:g}: give a number of seconds, 0 or more")
    if o.timeout is not None and o.timeout <= 0:
        raise UsageError(f"bad --timeout {o.timeout}: give a positive number of seconds")
    if o.network not in ("none", "bridge"):
        raise UsageError(f"bad --network {o.network!r}: use none or bridge")
    for name, value in (("cpus", o.cpus), ("pids", o.pids)):
        if value is not None and not value > 0:
            raise UsageError(f"bad --{name} value: Input should be greater than 0")
    try:
        memory = None if o.memory is None else parse_size(o.memory)
    except ValueError as e:
        raise UsageError(f"bad --memory value: {e}") from None
    try:
        shm_size = None if o.shm_size is None else parse_size(o.shm_size)
    except ValueError as e:
        raise UsageError(f"bad --shm-size value: {e}") from None
    try:
        tmpfs = dict(check_tmpfs(t, o.force_unsafe_mounts) for t in o.tmpfs)
        if o.gpus is not None:
            device_request(o.gpus)
        ports = []
        if o.publish:  # (its module only when asked: the path of a plain run stays short)
            from executors.docker.publish import parse_publish

            ports = [parse_publish(p) for p in o.publish]
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        mounts = [SimpleNamespace(source=src, target=dst, read_only=ro, scan=True)
                  for src, dst, ro in map(parse_mount, o.mounts)]
        given = {"network": o.network, **({"user": o.user} if o.user else {})}
        cfg = SimpleNamespace(**{**DEFAULTS, **given}, image=qualify(o.image or DEFAULT_IMAGE), dns=None,
                              limits=SimpleNamespace(memory=memory, cpus=o.cpus, pids=o.pids, tmpfs=None),
                              mounts=mounts, env=parse_env(o.env), workdir=o.workdir, runtime=o.runtime,
                              lifecycle="per-call", cap_add=[], force_unsafe_mounts=o.force_unsafe_mounts,
                              session=os.urandom(6).hex(), ttl=(o.timeout or 86400) + 600, labels={},
                              tmpfs=tmpfs, shm_size=shm_size, gpus=o.gpus,
                              publish=[tuple(p) for p in ports] if o.network != "none" else [],
                              entrypoint=None if o.entrypoint is None else [o.entrypoint] if o.entrypoint else [])
        for m in mounts:
            check_mount(m, o.force_unsafe_mounts)
    except InvalidConfig as e:
        raise UsageError(str(e)) from None
    return cfg


def build_config(o):
    """plain_config(o) as a SandboxConfig (the Docker SDK's path, and `runner serve`'s exec)."""
    from executors.docker.config import Mount, SandboxConfig
    from executors.models import Limits

    p = plain_config(o)
    fields = {k: v for k, v in vars(p).items() if k not in ("limits", "mounts")}
    return SandboxConfig(**fields, limits=Limits(**vars(p.limits)), mounts=[Mount(**vars(m)) for m in p.mounts])


def parse_env(items: list[str]) -> dict[str, str]:
    """K=V sets a value; a bare K copies it from this environment (an explicit grant)."""
    env = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise UsageError(f"bad --env {item!r}: use NAME=VALUE or NAME")
        if not eq:
            if key not in os.environ:
                raise UsageError(f"--env {key}: not set in this environment; use {key}=VALUE")
            value = os.environ[key]
        env[key] = value
    return env


def qualify(image: str) -> str:
    """Docker treats a name without a tag as :latest; say so explicitly."""
    last = image.rsplit("/", 1)[-1]
    return image if ":" in last or "@" in image else f"{image}:latest"


# -- the engine -----------------------------------------------------------------------------------
def local_engine(host: str | None):
    """The engine at host (None: DOCKER_HOST or the default socket) over its unix socket, with the
    standard library (executors/docker/wire.py's Engine); None when it is reached over tcp:// or
    ssh:// (the Docker SDK's path: runner/backends/docker.py)."""
    from executors.docker.wire import Engine, socket_path

    path = socket_path(host)
    return None if path is None else Engine(path, host)


def run_once(engine, cfg, argv: list[str], **kw):
    """argv in a fresh container of cfg (plain_config), attached, then removed: the one-shot run
    of executors/docker/oneshot.py (its keywords: stdin, on_output, timeout, relay, stop_timeout,
    tty, on_start). Returns its ExecResult."""
    from executors.docker import oneshot

    return oneshot.run(engine, cfg, argv, **kw)


@contextmanager
def published(engine, cfg, publish: list[str]):
    """-p without egress (network none): the sandbox goes on a closed network of its own and
    runner relays the ports (executors/docker/publish.py); yields what to call once it runs (None
    when there is nothing to relay)."""
    if not publish or cfg.network != "none":
        yield None
        return
    from executors.docker.egress import SANDBOX_DNS
    from executors.docker.publish import Relay, parse_publish

    with Relay(engine, cfg.session, cfg.ttl, [parse_publish(p) for p in publish]) as r:
        cfg.network = r.network
        cfg.dns = list(SANDBOX_DNS)  # the engine's resolver forwards unknown names upstream even here
        yield r.connect


# -- detached runs (runner/cli/detached.py says what they are) ------------------------------------
def start_detached(engine, cfg, argv: list[str], *, role: str, tty: bool, interactive: bool, remove: bool,
                   name: str | None, log: dict) -> str:
    """Create and start cfg's container for argv, left running: labelled with role, its output in
    the engine's json-file log of options `log`, removed when it ends if `remove`. Its id."""
    from executors.docker import labels as L
    from executors.docker import oneshot
    from executors.docker.runtimes import StartFailed, chosen, started
    from executors.docker.wire import EngineRefused

    key = engine.base_url or ""
    runtime = chosen(cfg.runtime, key, lambda: engine.json("GET", "/info"))

    def run(rt):
        body = oneshot.body_for(cfg, argv, os.urandom(6).hex(), rt, tty=tty)
        body["Labels"][L.ROLE] = role
        body.update(AttachStdin=False, AttachStdout=False, AttachStderr=False, OpenStdin=interactive,
                    StdinOnce=False)
        hc = body["HostConfig"]
        hc["LogConfig"] = {"Type": "json-file", "Config": log}
        hc["AutoRemove"] = bool(remove)
        try:
            cid = engine.json("POST", f"/containers/create{f'?name={name}' if name else ''}", body)["Id"]
        except EngineRefused as e:
            from executors.docker.engine import image_missing

            if e.status == 404 and "image" in e.message.lower():
                raise image_missing(cfg.image) from None
            if e.status == 409:
                raise RunnerError(f"--name {name}: a container of that name exists already") from None
            raise
        try:
            engine.json("POST", f"/containers/{cid}/start")
        except EngineRefused as e:
            oneshot.remove_container(engine, cid)
            raise StartFailed(e) from None
        return cid

    try:
        return started(runtime, cfg.runtime, key, run)
    except StartFailed as e:
        raise e.error from None


def inspect_run(engine, ref: str, role: str) -> dict | None:
    """The engine's description of container `ref` (a name or id, already checked to be one) if it
    is one of runner's own of that role; None if there is no such container. Raises RunnerError for
    any other container."""
    from executors.docker import labels as L
    from executors.docker.wire import EngineRefused, quote

    try:
        info = engine.json("GET", f"/containers/{quote(ref)}/json")
    except EngineRefused as e:
        if e.status == 404:
            return None
        raise
    labels = (info.get("Config") or {}).get("Labels") or {}
    if labels.get(L.MANAGED) != "true" or labels.get(L.ROLE) != role:
        raise RunnerError(f"{ref!r} is no detached run of runner: runner leaves other containers alone")
    return info


def list_runs(engine, role: str, all_: bool) -> list[dict]:
    """runner's containers of that role (running ones; every one with all_), as the engine lists them."""
    import json

    from executors.docker import labels as L
    from executors.docker.wire import quote

    filters = quote(json.dumps({"label": [f"{L.MANAGED}=true", f"{L.ROLE}={role}"]}))
    return engine.json("GET", f"/containers/json?all={int(all_)}&filters={filters}") or []


def copy_logs(engine, info: dict, follow: bool, on_output: Callable[[str, bytes], None]) -> None:
    """The container's logged output to on_output(stream, bytes); with follow, until it ends."""
    from executors.docker.oneshot import _pump
    from executors.docker.wire import Frames, Raw

    sock, early = engine.stream(f"/containers/{info['Id']}/logs?stdout=1&stderr=1&follow={int(follow)}")
    try:
        stream = Raw(sock, early) if (info.get("Config") or {}).get("Tty") else Frames(sock, early)
        _pump(engine, info["Id"], stream, on_output, None)
    finally:
        sock.close()


def stop_and_remove(engine, cid: str, grace: float) -> None:
    """SIGTERM, SIGKILL after grace seconds, then the container removed (its log with it)."""
    from executors.docker.oneshot import remove_container
    from executors.docker.wire import EngineRefused

    try:
        engine.json("POST", f"/containers/{cid}/stop?t={int(grace)}", timeout=grace + 60)
    except EngineRefused as e:
        if e.status not in (304, 404):
            raise
    remove_container(engine, cid)


def attach_run(engine, info: dict, *, stdin, on_output: Callable[[str, bytes], None], relay: Any,
               size: Callable[[], "tuple[int, int] | None"]) -> int:
    """Attach to the container of info: its output to on_output, stdin (a raw file, when it was
    started with -i) copied in, the signals `relay` (runner/cli/interrupts.py) takes passed on, its
    terminal (-t) sized by size(), until it ends. Its exit status (0 when it was removed as it ended)."""
    from executors.docker.oneshot import _feed, _pump, _resize
    from executors.docker.wire import EngineRefused, Frames, Raw

    cid, config = info["Id"], info.get("Config") or {}
    tty, interactive = bool(config.get("Tty")), bool(config.get("OpenStdin"))
    sock, early = engine.hijack(f"/containers/{cid}/attach?stream=1&stdin={int(interactive)}&stdout=1&stderr=1")
    try:
        if tty:
            _resize(engine, cid, size())
        stop_feeding = _feed(sock, stdin) if interactive else (lambda: None)
        relay.active = True
        try:
            _pump(engine, cid, Raw(sock, early) if tty else Frames(sock, early), on_output, None, relay,
                  tty=size if tty else None)
        finally:
            relay.active = False
            stop_feeding()
    finally:
        sock.close()
    try:
        return int(engine.json("POST", f"/containers/{cid}/wait", timeout=None)["StatusCode"])
    except EngineRefused as e:
        if e.status == 404:  # removed as it ended (--rm): its status went with it
            return 0
        raise


# -- images (runner/cli/images.py: the recipes; here what the engine does with them) -------------
def image_state(client, name: str, label: str, digest: str) -> "tuple[str, dict | None]":
    """('missing' | 'stale' | 'ok', {id, short_id, size} or None) of image `name`, stale when its
    label `label` is not `digest`. client: the Docker SDK's (DockerBackend.client)."""
    import docker.errors

    try:
        img = client.images.get(name)
    except docker.errors.ImageNotFound:
        return "missing", None
    found = {"id": img.id, "short_id": img.short_id.split(":")[-1], "size": img.attrs.get("Size", 0)}
    return ("stale" if (img.labels or {}).get(label) != digest else "ok"), found


def remove_image(client, image_id: str) -> None:
    """Remove an image no longer tagged, unless something uses it (then it stays)."""
    try:
        client.images.remove(image_id, noprune=False)
    except Exception:
        pass


def import_image(client, tarball: str, name: str, changes: list[str]) -> None:
    """Load a root file system's tarball as image `name` (repository:tag), with Dockerfile changes."""
    repo, tag = name.split(":")
    client.api.import_image_from_file(tarball, repository=repo, tag=tag, changes=changes)


def build_image(client, context: str, name: str, labels: dict[str, str], say: Callable[[str], None]) -> None:
    """Build the Dockerfile in context as `name` with labels, offline (no pull); each line of the
    build to say(). Raises the SDK's BuildError on a failed step."""
    import docker.errors

    stream = client.api.build(path=context, tag=name, rm=True, forcerm=True, decode=True, pull=False, labels=labels)
    for chunk in stream:
        if "stream" in chunk and chunk["stream"].strip():
            say("  " + chunk["stream"].rstrip())
        if "error" in chunk:
            raise docker.errors.BuildError(chunk["error"], [])
