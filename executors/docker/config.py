"""Sandbox configuration: hardened by default; every loosening is an explicit field."""
from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..models import DEFAULT_IMAGE, DEFAULT_LIMITS, Limits
from .hardening import DEFAULTS, create_kwargs  # noqa: F401  (create_kwargs: its home was here)
from .mounts import DOCKER_SOCKETS, KERNEL_TREES, SCAN_LIMIT, check_mount, parse_mount  # noqa: F401


class Mount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    read_only: bool = False
    scan: bool = Field(default=True, description="look inside a directory source for sockets and devices "
                       "(bounded); the runner turns it off for the workspace, whose contents are the sandbox's")
    identity: tuple[int, int] | None = Field(default=None, description="(st_dev, st_ino) the source had when it "
                                             "was checked (mounts.identity): a started container whose mount at "
                                             "target is another is removed (mounts.check_started)")

    @classmethod
    def parse(cls, spec: str) -> "Mount":
        """'SRC:DST[:ro|rw]' -> Mount. SRC may be relative to the current directory."""
        source, target, read_only = parse_mount(spec)
        return cls(source=source, target=target, read_only=read_only)


class SandboxConfig(BaseModel):
    """How a sandbox container is made. The defaults are the hardened ones."""

    model_config = ConfigDict(extra="forbid")

    image: str = DEFAULT_IMAGE
    limits: Limits = Field(default_factory=lambda: DEFAULT_LIMITS.model_copy())
    network: str = DEFAULTS["network"]
    dns: list[str] | None = Field(default=None, description="the container's upstream DNS servers; "
                                  "['127.0.0.1'] makes them a dead end (egress allowlist mode)")
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    user: str = DEFAULTS["user"]
    workdir: str | None = None
    runtime: str | None = None
    lifecycle: Literal["per-session", "per-call"] = "per-session"
    # Loosenings: each one off by default.
    read_only_root: bool = DEFAULTS["read_only_root"]
    no_new_privileges: bool = DEFAULTS["no_new_privileges"]
    cap_add: list[str] = Field(default_factory=list)
    seccomp_unconfined: bool = DEFAULTS["seccomp_unconfined"]
    init: bool = DEFAULTS["init"]
    force_unsafe_mounts: bool = False
    # `runner exec`'s docker options (none by default).
    tmpfs: dict[str, str] = Field(default_factory=dict, description="extra tmpfs mounts: path -> options "
                                  "(hardening.check_tmpfs; always nosuid,nodev)")
    shm_size: int | None = None
    gpus: str | None = Field(default=None, description="all, N or device=ID,...: GPUs through the engine's "
                             "device requests")
    entrypoint: list[str] | None = None
    publish: list[tuple[str, int, int]] = Field(default_factory=list, description="(ip, host port, container "
                                                "port): the engine's port bindings, on a network with egress")
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
