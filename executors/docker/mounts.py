"""Mount sources a sandbox may see: parsed from `SRC:DST[:ro]` and refused by what they are (the
host's root, a socket, a device, a directory holding one, the kernel's trees). Standard library
only: `runner exec` checks its mounts without loading pydantic; config.Mount uses the same code."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

from ..errors import InvalidConfig

DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


def parse_mount(spec: str) -> tuple[str, str, bool]:
    """'SRC:DST[:ro|rw]' -> (absolute source, target, read_only). SRC may be relative to the
    current directory."""
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
    return os.path.abspath(src), dst, mode == "ro"


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


def check_mount(m, force: bool = False) -> None:
    """Refuse a mount (anything with `source` and `scan`: config.Mount, or `runner exec`'s plain one)
    that does not exist or that hands the sandbox the host: its root, a socket or a
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


def identity(root: str, path: str) -> tuple[int, int]:
    """(st_dev, st_ino) of `path` (inside root: relative, or absolute as root sees it) reached
    from root one component at a time, no link followed (OSError: ELOOP names one on the way).
    The engine resolves a bind mount's source by name when it starts a container, following
    links: a source the sandbox swapped for a link after runner checked it would hand the next
    sandbox the host's directory. runner notes each workspace source's identity this way when it
    plans the sandbox, and the executor finds the same one at the target once the container has
    started (check_started), from /proc/PID/root, before the sandbox is given anything to run: a
    Runner's container runs only runner's own bootstrap until its payload comes over stdin."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in (p for p in path.split("/") if p not in ("", ".")):
            if name == "..":
                raise OSError(errno.EINVAL, f"'..' in {path}")
            nfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.ELOOP, f"{name} (in {path}) is a symbolic link")
        st = os.fstat(fd)
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


def check_started(mounts, pid: int) -> None:
    """Each mount with an identity (config.Mount.identity) is that very file or directory at its
    target in the started container whose first process is pid (seen from this machine: the
    engine runs here, under a runtime that shares this kernel). InvalidConfig names the first
    that is not: the caller removes the container."""
    for m in mounts:
        if m.identity is None:
            continue
        try:
            got = identity(f"/proc/{pid}/root", m.target)
        except OSError as e:
            got = e.strerror or str(e)
        if got != tuple(m.identity):
            raise InvalidConfig(f"the sandbox's mount at {m.target} is not the {m.source} runner checked ({got}): "
                                "its source was changed, swapped for a link say, before the engine mounted it; "
                                "the sandbox was removed before anything ran in it")


def check_if_here(mounts, engine: Callable[[], dict], attrs: Callable[[], dict]) -> None:
    """check_started() where it can be done: the mounts carry identities (a Runner's sandbox: its
    workspace sources), the controller is root, the engine (engine(): runtimes.engine_info's,
    asked only then) runs on this machine, and the container (attrs(): its inspect) under runc or
    crun. Elsewhere (a remote engine or node, gVisor, not root) it cannot be looked at."""
    from .runtimes import on_this_machine

    if not any(m.identity for m in mounts) or os.geteuid() != 0:
        return
    known = engine()
    if not on_this_machine(known):
        return
    got = attrs()
    runtime = (got.get("HostConfig") or {}).get("Runtime") or known.get("DefaultRuntime")
    pid = (got.get("State") or {}).get("Pid")
    if runtime in ("runc", "crun", "io.containerd.runc.v2") and isinstance(pid, int) and pid > 0:
        check_started(mounts, pid)
