"""While a host command runs, the sandbox is frozen: no process of it can rewrite the workspace.

host-shell checks the repository and then starts git, which reads `.git/config` (and hooks,
attributes, refs) again, later, by path. A process left running in the sandbox could swap in a
configuration that names a program between the check and the read. Pausing the session's
sandbox containers (the cgroup freezer) for the length of the host command closes that window
for the docker executor; they are resumed whatever happens.
"""
from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def frozen(session: str):
    """Pause this session's running sandbox containers (not its egress proxy) until the block ends."""
    from executors import ExecutorError
    from executors.docker import labels as L
    from executors.docker.engine import connect

    client = connect()
    paused = []
    try:
        for c in client.containers.list(filters={"label": f"{L.SESSION}={session}", "status": "running"}):
            if c.labels.get(L.ROLE, "").startswith("egress"):
                continue
            try:
                c.pause()
                paused.append(c)
            except Exception as e:
                if _still_running(c):  # fail closed: no host command next to a sandbox that runs
                    raise ExecutorError(f"could not pause the sandbox while the host command runs: {e}") from None
                # a per-call container that ended (and is being removed) meanwhile: nothing runs there
        yield paused
    finally:
        for c in paused:
            try:
                c.unpause()
            except Exception:  # gone meanwhile: nothing left to resume
                pass
        client.close()


def _still_running(container) -> bool:
    try:
        container.reload()
    except Exception:  # removed
        return False
    return container.status in ("running", "restarting")
