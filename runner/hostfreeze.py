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
        try:
            for c in client.containers.list(filters={"label": f"{L.SESSION}={session}", "status": "running"}):
                if not c.labels.get(L.ROLE, "").startswith("egress"):
                    c.pause()
                    paused.append(c)
        except Exception as e:  # fail closed: no host command next to a sandbox that still runs
            raise ExecutorError(f"could not pause the sandbox while the host command runs: {e}") from None
        yield paused
    finally:
        for c in paused:
            try:
                c.unpause()
            except Exception:  # gone meanwhile: nothing left to resume
                pass
        client.close()
