"""`runner exec`: one command in a fresh, hardened container, removed afterwards."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from executors.defaults import DEFAULT_IMAGE, OOM_EXIT, TIMEOUT_EXIT

from ..errors import UsageError


@dataclass
class ExecOptions:
    cmd: list[str]
    image: str | None = None  # None: executors.models.DEFAULT_IMAGE
    timeout: float | None = None
    memory: str | None = None
    cpus: float | None = None
    pids: int | None = None
    network: str = "none"
    mounts: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    workdir: str | None = None
    user: str | None = None
    runtime: str | None = None
    host: str | None = None
    force_unsafe_mounts: bool = False


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


def plain_config(o: ExecOptions):
    """The sandbox `o` asks for, checked, as a SandboxConfig's fields on a plain object: standard
    library only (the local engine's path never loads pydantic). Raises UsageError."""
    from types import SimpleNamespace

    from executors.defaults import parse_size
    from executors.docker.hardening import DEFAULTS
    from executors.docker.mounts import check_mount, parse_mount
    from executors.errors import InvalidConfig

    if not o.cmd:
        raise UsageError("no command given: runner exec [OPTIONS] -- CMD [ARGS...]")
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
        mounts = [SimpleNamespace(source=src, target=dst, read_only=ro, scan=True)
                  for src, dst, ro in map(parse_mount, o.mounts)]
        given = {"network": o.network, **({"user": o.user} if o.user else {})}
        cfg = SimpleNamespace(**{**DEFAULTS, **given}, image=_qualify(o.image or DEFAULT_IMAGE), dns=None,
                              limits=SimpleNamespace(memory=memory, cpus=o.cpus, pids=o.pids, tmpfs=None),
                              mounts=mounts, env=parse_env(o.env), workdir=o.workdir, runtime=o.runtime,
                              lifecycle="per-call", cap_add=[], force_unsafe_mounts=o.force_unsafe_mounts,
                              session=os.urandom(6).hex(), ttl=(o.timeout or 86400) + 600, labels={})
        for m in mounts:
            check_mount(m, o.force_unsafe_mounts)
    except InvalidConfig as e:
        raise UsageError(str(e)) from None
    return cfg


def build_config(o: ExecOptions):
    """plain_config(o) as a SandboxConfig (the Docker SDK's path, and `runner serve`'s exec)."""
    from executors.docker.config import Mount, SandboxConfig
    from executors.models import Limits

    p = plain_config(o)
    fields = {k: v for k, v in vars(p).items() if k not in ("limits", "mounts")}
    return SandboxConfig(**fields, limits=Limits(**vars(p.limits)), mounts=[Mount(**vars(m)) for m in p.mounts])


def _qualify(image: str) -> str:
    """Docker treats a name without a tag as :latest; say so explicitly."""
    last = image.rsplit("/", 1)[-1]
    return image if ":" in last or "@" in image else f"{image}:latest"


def run(o: ExecOptions) -> int:
    """Run the command; return its exit status (124 on timeout, 137 on OOM)."""
    from executors.docker.wire import socket_path

    path = socket_path(o.host)
    code, timed_out, oom = _run_local(o, path) if path is not None else _run_sdk(o)
    if timed_out:
        print(f"runner: timed out after {o.timeout:g}s: killed the command and all its processes", file=sys.stderr)
        return TIMEOUT_EXIT
    if oom:
        limit = o.memory or "the default 512m"
        print(f"runner: out of memory: the memory limit ({limit}) killed the command", file=sys.stderr)
        return OOM_EXIT
    return code


def _on_output(stream: str, data: bytes) -> None:
    f = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
    f.write(data)
    f.flush()


def _run_local(o: ExecOptions, path: str) -> tuple[int, bool, bool]:
    """The local engine, over its unix socket with the standard library (executors/docker/oneshot.py):
    no docker-py, no pydantic, one round trip per step."""
    from executors.docker import oneshot
    from executors.docker.wire import Engine

    cfg = plain_config(o)
    # SIGINT, SIGTERM, SIGHUP raise in here (runner/cli/interrupts.py, installed by the CLI): the
    # container is removed on the way out
    res = oneshot.run(Engine(path, o.host), cfg, o.cmd, stdin=_stdin(), on_output=_on_output, timeout=o.timeout)
    return res.exit_code, res.timed_out, res.oom_killed


def _run_sdk(o: ExecOptions) -> tuple[int, bool, bool]:
    """An engine reached over tcp:// or ssh://: the Docker SDK's DockerExecutor."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    cfg = build_config(o)
    ex = DockerExecutor(cfg, base_url=o.host)
    ex.start()  # checks engine and image; per-call creates nothing yet
    req = ExecRequest(argv=o.cmd, timeout=o.timeout)
    try:  # SIGINT, SIGTERM, SIGHUP raise here (runner/cli/interrupts.py, installed by the CLI)
        res = ex.exec(req, stdin=_stdin(), on_output=_on_output)
    finally:
        ex.stop()
    return res.exit_code, res.timed_out, res.oom_killed


def _stdin():
    try:
        return sys.stdin.buffer if sys.stdin is not None and not sys.stdin.closed else None
    except (AttributeError, ValueError):
        return None

