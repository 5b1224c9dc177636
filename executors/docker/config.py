"""Sandbox configuration: hardened by default; every loosening is an explicit field."""
from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import InvalidConfig
from ..models import DEFAULT_IMAGE, DEFAULT_LIMITS, Limits
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


class Mount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    read_only: bool = False
    scan: bool = Field(default=True, description="look inside a directory source for sockets and devices "
                       "(bounded); the runner turns it off for the workspace, whose contents are the sandbox's")

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


# Host filesystems that are the kernel's or the devices' own: never a sandbox's to see.
KERNEL_TREES = ("/proc", "/sys", "/dev")
SCAN_LIMIT = 20_000  # entries looked at inside a directory source


def _kind(st: os.stat_result) -> str | None:
    if stat.S_ISSOCK(st.st_mode):
        return "a socket"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "a device"
    return None


def _kernel_devs() -> dict[int, str]:
    """{st_dev: tree} of /proc, /sys and /dev where each is a filesystem of its own."""
    out = {}
    try:
        root = os.stat("/").st_dev
    except OSError:
        return out
    for t in KERNEL_TREES:
        try:
            dev = os.stat(t).st_dev
        except OSError:
            continue
        if dev != root:
            out.setdefault(dev, t)
    return out


def _why_unsafe(real: Path, scan: bool) -> str | None:
    """Why mounting `real` (no links left in it) would hand the sandbox the host: what it is, not
    what it is called. A hard link to a socket is a socket; a bind mount of /proc is procfs."""
    if real == Path("/"):
        return "it is the host's root"
    st = real.stat()
    kind = _kind(st)
    if kind:
        return f"it is {kind} (a way into a host service or the hardware: a container engine's socket is root " \
               "on the host)"
    devs = _kernel_devs()
    for t in KERNEL_TREES:
        if real == Path(t) or real.is_relative_to(t) or Path(t).is_relative_to(real):
            return f"it is or holds {t}, the kernel's or the devices' own files"
    if st.st_dev in devs:
        return f"it lies on the filesystem of {devs[st.st_dev]}"
    for sock in DOCKER_SOCKETS:
        try:
            sock_real = Path(os.path.realpath(sock))
            if stat.S_ISSOCK(sock_real.stat().st_mode) and sock_real.is_relative_to(real):
                return f"it holds the container engine's socket ({sock}), which is root on the host"
        except OSError:
            continue
    if not scan or not stat.S_ISDIR(st.st_mode):
        return None
    seen, stack = 0, [real]
    while stack and seen < SCAN_LIMIT:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                seen += 1
                if seen > SCAN_LIMIT:
                    break
                try:
                    est = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = _kind(est)
                if kind:
                    return f"it holds {kind}, {e.path} (a way into a host service or the hardware)"
                if est.st_dev in devs:
                    return f"it holds {e.path}, on the filesystem of {devs[est.st_dev]}"
                if stat.S_ISDIR(est.st_mode):
                    stack.append(e.path)
    return None


def check_mount(m: Mount, force: bool = False) -> None:
    """Refuse mounts that do not exist or that hand the sandbox the host: its root, a socket or a
    device (whatever its name or link count), a directory holding one (looked for up to
    SCAN_LIMIT entries, links never followed, unless `m.scan` is off), /proc, /sys and /dev or
    anything on their filesystems."""
    src = Path(m.source)
    if not os.path.lexists(src) or not src.exists():
        raise InvalidConfig(f"mount source {m.source} does not exist")
    if force:
        return
    real = Path(os.path.realpath(src))
    try:
        why = _why_unsafe(real, m.scan)
    except OSError as e:
        raise InvalidConfig(f"mount source {m.source}: cannot look at it ({e.strerror})") from None
    if why:
        shown = m.source if str(real) == m.source else f"{m.source} ({real})"
        raise InvalidConfig(f"refusing to mount {shown} into a sandbox: {why}; force it only if you mean it "
                            "(--force-unsafe-mounts)")


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
