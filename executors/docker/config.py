"""Sandbox configuration: hardened by default; every loosening is an explicit field."""
from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import InvalidConfig
from ..models import DEFAULT_LIMITS, Limits

DEFAULT_IMAGE = "runner/base:latest"
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


class Mount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    read_only: bool = False

    @classmethod
    def parse(cls, spec: str) -> "Mount":
        """'SRC:DST[:ro|rw]' -> Mount. SRC may be relative to the current directory."""
        parts = spec.split(":")
        if len(parts) == 2:
            src, dst, mode = *parts, "rw"
        elif len(parts) == 3:
            src, dst, mode = parts
        else:
            raise InvalidConfig(f"bad mount {spec!r}: use SRC:DST or SRC:DST:ro")
        if mode not in ("ro", "rw"):
            raise InvalidConfig(f"bad mount mode {mode!r} in {spec!r}: use ro or rw")
        if not src or not dst.startswith("/"):
            raise InvalidConfig(f"bad mount {spec!r}: DST must be an absolute path in the container")
        return cls(source=os.path.abspath(src), target=dst, read_only=mode == "ro")


def check_mount(m: Mount, force: bool = False) -> None:
    """Refuse mounts that do not exist or that hand the sandbox the host (/, the Docker socket)."""
    src = Path(m.source)
    if not src.exists():
        raise InvalidConfig(f"mount source {m.source} does not exist")
    real = src.resolve()
    if force:
        return
    if real == Path("/"):
        raise InvalidConfig(f"refusing to mount the host's root ({m.source}) into a sandbox; force it only if you mean it")
    for sock in DOCKER_SOCKETS:
        p = Path(sock)
        if p.exists() and stat.S_ISSOCK(p.lstat().st_mode if not p.is_symlink() else p.stat().st_mode):
            sock_real = p.resolve()
            if real == sock_real or sock_real.is_relative_to(real):
                raise InvalidConfig(f"refusing to mount {m.source}: it exposes the container engine's socket "
                                    f"({sock}), which is root on the host; force it only if you mean it")
    if real.is_socket() and real.name.endswith(".sock") and "docker" in real.name:
        raise InvalidConfig(f"refusing to mount the Docker socket {m.source}; force it only if you mean it")


class SandboxConfig(BaseModel):
    """How a sandbox container is made. The defaults are the hardened ones."""

    model_config = ConfigDict(extra="forbid")

    image: str = DEFAULT_IMAGE
    limits: Limits = Field(default_factory=lambda: DEFAULT_LIMITS.model_copy())
    network: str = "none"
    dns: list[str] | None = Field(default=None, description="the container's upstream DNS servers; "
                                  "['127.0.0.1'] makes them a dead end (egress allowlist mode)")
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    user: str = "1000:1000"
    workdir: str | None = None
    runtime: str | None = None
    lifecycle: Literal["per-session", "per-call"] = "per-session"
    # Loosenings: each one off by default.
    read_only_root: bool = True
    no_new_privileges: bool = True
    cap_add: list[str] = Field(default_factory=list)
    seccomp_unconfined: bool = False
    init: bool = True
    force_unsafe_mounts: bool = False
    # Bookkeeping.
    session: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    ttl: float = Field(default=24 * 3600, gt=0, description="seconds until `runner gc` may reap it")
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not k or "=" in k or "\x00" in k:
                raise ValueError(f"bad environment variable name {k!r}")
        return v

    def validate_mounts(self) -> None:
        for m in self.mounts:
            check_mount(m, self.force_unsafe_mounts)


def merged_limits(base: Limits, override: Limits | None) -> Limits:
    """Fill unset fields of `override` from `base`."""
    if override is None:
        return base
    return Limits(**{k: getattr(override, k) if getattr(override, k) is not None else getattr(base, k)
                     for k in Limits.model_fields})


def create_kwargs(cfg: SandboxConfig, labels: dict[str, str]) -> tuple[dict, dict]:
    """(container, host_config) arguments for docker-py's low-level create_container() that
    realise `cfg`: the hardened profile unless a loosening field says otherwise."""
    lim = merged_limits(DEFAULT_LIMITS, cfg.limits)
    security_opt = []
    if cfg.no_new_privileges:
        security_opt.append("no-new-privileges:true")
    if cfg.seccomp_unconfined:
        security_opt.append("seccomp=unconfined")
    host = dict(
        network_mode=cfg.network,
        cap_drop=["ALL"],
        cap_add=list(cfg.cap_add) or None,
        security_opt=security_opt,
        read_only=cfg.read_only_root,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={lim.tmpfs},mode=1777"},
        pids_limit=lim.pids,
        mem_limit=lim.memory,
        memswap_limit=lim.memory,
        nano_cpus=int(lim.cpus * 1e9) if lim.cpus else None,
        init=cfg.init,
        mounts=[_docker_mount(m) for m in cfg.mounts],
        ipc_mode="private",
        # Nothing a sandbox writes to its stdio reaches the engine's log (unbounded on the host's
        # disk, past tmpfs and quota, and unredacted): runner reads the stdio over attach/exec.
        log_config={"type": "none", "config": {}},
    )
    if cfg.runtime:
        host["runtime"] = cfg.runtime
    if cfg.dns is not None:
        host["dns"] = list(cfg.dns)
    container = dict(image=cfg.image, user=cfg.user, environment=dict(cfg.env), labels=labels,
                     working_dir=cfg.workdir, network_disabled=cfg.network == "none")
    return container, host


def _docker_mount(m: Mount):
    from docker.types import Mount as DockerMount

    return DockerMount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
