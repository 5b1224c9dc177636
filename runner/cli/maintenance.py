"""`runner gc` and `runner doctor`. gc goes through the backends (BackendConfig.collect_garbage);
doctor asks the docker backend about its engine, images and runtimes."""
from __future__ import annotations

import shutil


def gc(host: str | None = None, dry_run: bool = False) -> list[tuple[str, str, str]]:
    """Remove what runner left behind, on this machine and on the engine; return (what, kind or
    name, reason) of each."""
    return [row for step in gc_steps(host) for row in step(dry_run)]


def gc_steps(host: str | None = None) -> tuple:
    """gc's steps, each called with dry_run, in order: this machine's first (no engine is needed
    for them, so they are done even when none answers), then each backend's (its
    BackendConfig.collect_garbage: the docker engine's containers and networks, a swarm
    manager's services)."""
    from .. import backends
    from ..controller.piddirs import sweep_local
    from ..controller.snapshots import sweep as sweep_snapshots

    def backend_step(name: str):
        return lambda dry_run: backends.config_class(name).collect_garbage(host, dry_run)

    return (sweep_local, sweep_snapshots, *(backend_step(n) for n in backends.names() if backends.config_class(n).collects_garbage()))


def doctor(host: str | None = None) -> list[tuple[str, str, str]]:
    """(OK|WARN|FAIL, what, detail) rows: the Docker engine's (its runtimes, images and orphans:
    runner/backends/docker.py), then this machine's."""
    from ..backends.docker import DockerBackend
    from . import images

    rows = DockerBackend.engine_status(host, images.listing)
    if rows and rows[0][0] == "FAIL" and rows[0][1] == "engine":
        return rows
    if not shutil.which("debootstrap"):
        rows.append(("WARN", "debootstrap", "missing: needed only to build images (apt-get install debootstrap)"))
    return rows
