"""Labels on every container runner creates, so a reaper (`runner gc`) can find orphans."""
from __future__ import annotations

import os
import socket
import time

from ..posix import process_start_time  # noqa: F401  (named here too: the labels record it)

MANAGED = "runner.managed"
OWNER_PID = "runner.owner.pid"
OWNER_START = "runner.owner.start"
OWNER_PARENT = "runner.owner.parent"  # who started the owner (a shell, a test run): for whoever reads gc's list
OWNER_HOST = "runner.owner.host"
SESSION = "runner.session"
CREATED = "runner.created"
EXPIRES = "runner.expires"
ROLE = "runner.role"
EXECUTOR = "runner.executor"  # one DockerExecutor instance


def make_labels(session: str, ttl: float, role: str = "sandbox", extra: dict[str, str] | None = None) -> dict[str, str]:
    now = time.time()
    pid = os.getpid()
    labels = {
        MANAGED: "true",
        OWNER_PID: str(pid),
        OWNER_START: process_start_time(pid) or "",
        OWNER_PARENT: str(os.getppid()),
        OWNER_HOST: socket.gethostname(),
        SESSION: session,
        CREATED: f"{now:.3f}",
        EXPIRES: f"{now + ttl:.3f}",
        ROLE: role,
    }
    labels.update(extra or {})
    return labels


def orphan_reason(labels: dict[str, str], now: float | None = None) -> str | None:
    """Why a runner container is an orphan ('owner gone', 'expired'), or None while it is in use."""
    now = time.time() if now is None else now
    try:
        if float(labels.get(EXPIRES, "inf")) < now:
            return "expired"
    except ValueError:
        return "bad expiry label"
    if labels.get(ROLE) == "detached":
        return None  # `runner exec -d`: its owner left by design; only its expiry tells
    if labels.get(OWNER_HOST) != socket.gethostname():
        return None  # another machine's owner: only its expiry can tell
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return "bad owner label"
    start = process_start_time(pid)
    if start is None or (labels.get(OWNER_START) and start != labels[OWNER_START]):
        return f"owner pid {pid} is gone"
    return None
