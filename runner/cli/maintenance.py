"""`runner gc` and `runner doctor`. gc goes through the backends (BackendConfig.collect_garbage);
doctor looks at the Docker engine, the images and the runtimes."""
from __future__ import annotations

import shutil

from executors.docker import labels as L
from executors.docker.engine import connect


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

    def backend_step(name: str):
        return lambda dry_run: backends.config_class(name).collect_garbage(host, dry_run)

    return (sweep_local, *(backend_step(n) for n in backends.names() if backends.config_class(n).collects_garbage()))


def _runtime_row(client, picked: str, default: str) -> tuple[str, str, str]:
    """The runtime runner picks for sandboxes, tried: one hardened sandbox of the default image
    runs `true` under it, and where that fails, under the engine's default too (a runtime listed
    but unable to run here is given up by each process only after a failed start:
    executors/docker/runtimes.py)."""
    import time

    from executors.docker.config import SandboxConfig

    image = SandboxConfig().image
    try:
        client.images.get(image)
    except Exception:
        return ("OK", "sandbox runtime", f"{picked} (not tried: no image {image} yet): sandboxes whose policy names "
                "no runtime use it")
    t = time.monotonic()
    why = _try_runtime(client, picked)
    if why is None:
        return ("OK", "sandbox runtime", f"{picked}: ran a hardened sandbox in {(time.monotonic() - t) * 1000:.0f} ms; "
                "sandboxes whose policy names no runtime use it")
    if _try_runtime(client, default) is not None:
        return ("WARN", "sandbox runtime", f"{picked}: no hardened sandbox ran under it nor under the engine's default, "
                f"{default} ({why}): not the runtime's doing; see the rows below")
    return ("WARN", "sandbox runtime", f"{picked} is listed but could not run a sandbox here ({why}); each process "
            f"falls back to the engine's default, {default}, after one failed start: remove {picked} from the "
            "engine's runtimes, or name a runtime in the policy (sandbox.runtime)")


def _try_runtime(client, runtime: str) -> str | None:
    """None if one hardened sandbox ran `true` under runtime within 30 s, else what went wrong."""
    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    try:
        with DockerExecutor(client=client, lifecycle="per-call", runtime=runtime) as ex:
            res = ex.exec(ExecRequest(argv=["true"], timeout=30))
    except Exception as e:
        return str(e)[:400]
    if res.exit_code == 0:
        return None
    return ("timed out after 30 s" if res.timed_out else
            f"`true` exited {res.exit_code}: {res.stderr.decode(errors='replace').strip()[:300]}")


def doctor(host: str | None = None) -> list[tuple[str, str, str]]:
    """(OK|WARN|FAIL, what, detail) rows."""
    from executors.errors import EngineUnavailable

    from . import images

    rows: list[tuple[str, str, str]] = []
    try:
        client = connect(host)
    except EngineUnavailable as e:
        return [("FAIL", "engine", str(e))]
    info = client.info()
    rows.append(("OK", "engine", f"Docker {info.get('ServerVersion')} ({info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')})"))
    sec = " ".join(info.get("SecurityOptions") or [])
    rows.append(("OK" if "seccomp" in sec else "FAIL", "seccomp",
                 "default profile available" if "seccomp" in sec else "the engine has no seccomp: rebuild it with seccomp support"))
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    rows.append(("OK", "runtimes", ", ".join(runtimes)))
    from executors.docker.runtimes import PREFERRED, RUNC, pick

    picked, default = pick(info), info.get("DefaultRuntime") or "runc"
    if picked:
        rows.append(_runtime_row(client, picked, default))
    elif default not in RUNC:
        rows.append(("OK", "sandbox runtime", f"the engine's default, {default}"))
    else:
        rows.append(("WARN", "sandbox runtime", f"the engine's default, {default}: register {PREFERRED} for "
                     "faster starts (scripts/setup.sh does)"))
    if "runsc" not in runtimes:
        rows.append(("WARN", "gVisor", "runsc is not configured: apt-get install runsc, then add it to "
                     "/etc/docker/daemon.json runtimes with --platform=ptrace --network=none and restart dockerd"))
    rows.append(("OK" if info.get("InitBinary") or shutil.which("docker-init") else "WARN", "init",
                 info.get("InitBinary") or "no docker-init: --init will fail (apt-get install tini)"))
    for r in images.listing(client):
        if r["state"] == "ok":
            rows.append(("OK", f"image {r['name']}", f"{r['id']} {r['size_mb']}MB"))
        else:
            rows.append(("WARN" if r.get("optional") else "FAIL", f"image {r['name']}",
                         f"{r['state']}: run `runner images build`" + (" (optional)" if r.get("optional") else "")))
    from ..backends.docker import managed

    stale = [c for c in managed(client) if L.orphan_reason(c["Labels"])]
    rows.append(("WARN" if stale else "OK", "orphans", f"{len(stale)} orphaned container(s)" + (": run `runner gc`" if stale else "")))
    if not shutil.which("debootstrap"):
        rows.append(("WARN", "debootstrap", "missing: needed only to build images (apt-get install debootstrap)"))
    return rows
