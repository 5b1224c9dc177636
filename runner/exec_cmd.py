"""`runner exec`: one command in a fresh, hardened container, removed afterwards."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from executors.models import DEFAULT_IMAGE, OOM_EXIT, TIMEOUT_EXIT

from .errors import UsageError


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


def build_config(o: ExecOptions):
    from executors.docker.config import Mount, SandboxConfig
    from executors.errors import InvalidConfig
    from executors.models import Limits
    from pydantic import ValidationError

    if not o.cmd:
        raise UsageError("no command given: runner exec [OPTIONS] -- CMD [ARGS...]")
    if o.timeout is not None and o.timeout <= 0:
        raise UsageError(f"bad --timeout {o.timeout}: give a positive number of seconds")
    if o.network not in ("none", "bridge"):
        raise UsageError(f"bad --network {o.network!r}: use none or bridge")
    try:
        limits = Limits(memory=o.memory, cpus=o.cpus, pids=o.pids)
    except ValidationError as e:
        err = e.errors()[0]
        raise UsageError(f"bad --{err['loc'][0]} value: {err['msg'].removeprefix('Value error, ')}") from None
    try:
        mounts = [Mount.parse(m) for m in o.mounts]
        cfg_fields = dict(image=_qualify(o.image or DEFAULT_IMAGE), limits=limits, network=o.network, mounts=mounts,
                          env=parse_env(o.env), workdir=o.workdir, runtime=o.runtime, lifecycle="per-call",
                          force_unsafe_mounts=o.force_unsafe_mounts, ttl=(o.timeout or 86400) + 600)
        if o.user:
            cfg_fields["user"] = o.user
        cfg = SandboxConfig(**cfg_fields)
        cfg.validate_mounts()
    except InvalidConfig as e:
        raise UsageError(str(e)) from None
    return cfg


def _qualify(image: str) -> str:
    """Docker treats a name without a tag as :latest; say so explicitly."""
    last = image.rsplit("/", 1)[-1]
    return image if ":" in last or "@" in image else f"{image}:latest"


def run(o: ExecOptions) -> int:
    """Run the command; return its exit status (124 on timeout, 137 on OOM)."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    cfg = build_config(o)
    ex = DockerExecutor(cfg, base_url=o.host)
    ex.start()  # checks engine and image; per-call creates nothing yet
    req = ExecRequest(argv=o.cmd, timeout=o.timeout)
    out, err = sys.stdout.buffer, sys.stderr.buffer

    def on_output(stream: str, data: bytes) -> None:
        f = out if stream == "stdout" else err
        f.write(data)
        f.flush()

    try:  # SIGINT, SIGTERM, SIGHUP raise here (runner/interrupts.py, installed by the CLI)
        res = ex.exec(req, stdin=_stdin(), on_output=on_output)
    finally:
        ex.stop()
    if res.timed_out:
        print(f"runner: timed out after {o.timeout:g}s: killed the command and all its processes", file=sys.stderr)
        return TIMEOUT_EXIT
    if res.oom_killed:
        limit = o.memory or "the default 512m"
        print(f"runner: out of memory: the memory limit ({limit}) killed the command", file=sys.stderr)
        return OOM_EXIT
    return res.exit_code


def _stdin():
    try:
        return sys.stdin.buffer if sys.stdin is not None and not sys.stdin.closed else None
    except (AttributeError, ValueError):
        return None

