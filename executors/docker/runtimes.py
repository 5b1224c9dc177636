"""The OCI runtime of a sandbox whose config names none: crun where the engine offers it.

crun (C) starts a container in less time and CPU than runc (Go, which re-executes itself to set
up the namespaces): on this project's machine a hardened runner/base container's start went from
85-92 to 64-74 ms, and the engine's own create+start+remove rate from 5.8-6.5 to 7.1-7.7 a second
with one client (DESIGN.md, Speed). Both realise the OCI spec the engine writes: the seccomp
profile, capabilities, no-new-privileges, masked paths, read-only root and limits (the security
and conformance tests run on it). Where crun 1.8 differed (on cgroup v1 it left /sys/fs/cgroup a
writable tmpfs; it applies no oom_score_adj of 0), hardening.py now says so for both.

A config that names a runtime (runc, runsc) gets that one. An engine that lists no crun, or whose
default is not runc (gVisor made the default on purpose), gets its own default. scripts/setup.sh
installs and registers crun, and runs one sandbox under it first.

What an engine offers is asked once per engine and process (`GET /info`, or docker-py's info(); a
client handed in: once per executor),
and the same answer serves runner/controller/channel.py.

A runtime this module chose is never worse than the engine's default: a container it could not
start (the engine's "OCI runtime create failed", as crun registered by hand on a host it cannot run
on: cgroups in hybrid mode, a missing binary) is made again under the default, and if that one
starts, the engine's default serves that engine for the rest of the process (fell_back), with a
RuntimeFallback warning. A container the default cannot start either was not the runtime's fault:
that error is the caller's, and the choice stands. A runtime a config names is never replaced.
"""
from __future__ import annotations

import os
import threading
import warnings
from typing import Callable, TypeVar

from ..errors import ExecutorError

PREFERRED = "crun"
RUNC = ("runc", "io.containerd.runc.v2")  # an engine's default that crun stands in for

_info: dict[str, dict] = {}  # engine key -> its `docker info`
_refused: dict[str, str] = {}  # engine key -> why the runtime chosen for it could not start a container
_lock = threading.Lock()
T = TypeVar("T")


class RuntimeFallback(RuntimeWarning):
    """The runtime chosen for an engine could not start a sandbox there; its default serves it now."""


def engine_info(key: str, fetch: Callable[[], dict]) -> dict:
    """The engine's `docker info`, fetched once per key (an engine's address) and process. A
    failed fetch raises and is not remembered."""
    with _lock:
        known = _info.get(key)
    if known is None:
        known = fetch()
        with _lock:
            _info.setdefault(key, known)
    return known


def on_this_machine(info: dict) -> bool:
    """Whether the engine of this `docker info` runs its containers on this very machine: its host
    name and kernel are ours (not a VM, another host, or from inside a container)."""
    uname = os.uname()
    return info.get("Name") == uname.nodename and info.get("KernelVersion") == uname.release


def chosen(configured: str | None, key: str, fetch: Callable[[], dict], cache: bool = True) -> str | None:
    """The runtime a container gets: `configured` when set; else what pick() makes of the engine's
    info; else None (the engine's default). An engine that cannot say gets its default.
    cache: False for an info that is not the engine at `key` (a client handed in)."""
    if configured:
        return configured
    if key in _refused:
        return None
    try:
        info = engine_info(key, fetch) if cache else fetch()
    except Exception:
        return None
    return pick(info)


def pick(info: dict) -> str | None:
    """PREFERRED when the engine (its `docker info`) lists it and its own default is runc; else None.
    An engine whose default is another runtime (gVisor's runsc, say) was set up that way on
    purpose: its default stays."""
    default = info.get("DefaultRuntime") or "runc"
    if default not in RUNC:
        return None
    return PREFERRED if PREFERRED in (info.get("Runtimes") or {}) else None


# What the engine says of a start that any runtime would refuse (the request's own fault: its
# command, working directory or user), in runc's words or crun's: no reason to try another.
REQUEST_FAULTS = ("executable file", "chdir", "cwd", "not a directory", "permission denied", "unable to find user",
                  "unable to find group")


def blames(error: BaseException) -> bool:
    """Whether an engine's refusal to start a container may be its runtime's own failure: the
    runtime would not create the container ("OCI runtime create failed": nothing of the command
    ran), for no fault of the request's (REQUEST_FAULTS)."""
    text = str(error)
    return "OCI runtime create failed" in text and not any(f in text.lower() for f in REQUEST_FAULTS)


class StartFailed(ExecutorError):
    """The engine would not start a container: `error`, what it said. Raised by the start given to
    started(), once that container is removed again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def started(runtime: str | None, configured: str | None, key: str, start: Callable[[str | None], T]) -> T:
    """start(runtime): make and start one container under runtime (None: the engine's default);
    StartFailed if the engine would not start it. Where runtime is this module's choice (no config
    named one) and blames() that failure, once more under the engine's default; if that one
    starts, the choice is given up for the engine at key (fell_back). StartFailed otherwise: the
    last start's."""
    try:
        return start(runtime)
    except StartFailed as e:
        if configured or runtime is None or not blames(e.error):
            raise
        first = e.error
    result = start(None)
    fell_back(key, runtime, str(first))
    return result


def fell_back(key: str, runtime: str, why: str) -> None:
    """runtime could not start a container on the engine at key, which its default then started:
    its default from now on in this process, and a warning (once per engine)."""
    with _lock:
        first = key not in _refused
        _refused[key] = why
    if first:
        try:
            warnings.warn(f"{runtime} could not start a sandbox on this Docker engine ({why.strip()[:400]}); "
                          "sandboxes run under the engine's default runtime instead (`runner doctor` checks it; a "
                          "policy's sandbox.runtime or --runtime names one)", RuntimeFallback, stacklevel=3)
        except Exception:  # (warnings made errors, a stderr gone): the container has started and is
            pass  # its caller's to use or remove; raised here, it would be no one's


def refused(key: str) -> str | None:
    """Why the runtime chosen for the engine at key was given up in this process (fell_back), or None."""
    return _refused.get(key)
