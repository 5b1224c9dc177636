"""The hardened container: the one place that says how a sandbox is made, as docker-py's
create_container() arguments. The SDK path (executor.py) passes them to docker-py; `runner exec`'s
path (oneshot.py) sends wire.create_body() of the very same arguments, so both ask the engine for
the same container (tests/integration/docker/test_wire.py compares the two bodies). Standard library only."""
from __future__ import annotations

from ..defaults import DEFAULT_LIMIT_VALUES

# SandboxConfig's hardened defaults (each loosening is an explicit field there).
DEFAULTS = {
    "network": "none",
    "user": "1000:1000",
    "read_only_root": True,
    "no_new_privileges": True,
    "seccomp_unconfined": False,
    "init": True,
}


# Under gVisor the container's host pids cgroup counts gVisor's own tasks too: the sentry's
# threads, the gofer, and on the ptrace platform a host stub (with threads) per guest process.
# Measured here (runsc --platform=ptrace): 44 host tasks for an idle sandbox, about 11 more per
# guest process. At the host limit the sentry cannot make a thread and the whole sandbox ends
# (a Go panic, exit status 2: the flake of tests/integration/security/test_protection.py::
# test_pins_hold_under_gvisor, whose limit of 128 left room for about 8 guest processes). So a
# limit of N processes is N * 16 + 64 host tasks under runsc: the guest gets about what runc
# gives it, and the host stays bounded.
GVISOR_TASKS_PER_PROCESS = 16
GVISOR_BASE_TASKS = 64


def host_pids_limit(pids: int | None, runtime: str | None) -> int | None:
    """The host cgroup's pids limit that gives the sandbox `pids` processes under `runtime`."""
    if pids and runtime and runtime.startswith("runsc"):
        return pids * GVISOR_TASKS_PER_PROCESS + GVISOR_BASE_TASKS
    return pids


def limit_values(limits) -> dict:
    """{memory, cpus, pids, tmpfs}: `limits`' own values, the hardened default for each one unset."""
    return {k: v if (v := getattr(limits, k, None)) is not None else d for k, d in DEFAULT_LIMIT_VALUES.items()}


# Read-only inside every sandbox: the engine's own list (moby's default spec: ReadonlyPaths), named
# again because a list given replaces it, and the cgroup file system's mount point. runc mounts that
# read-only; crun (1.8, cgroup v1) makes it a writable 1 MiB tmpfs (mode 1777) under the read-only
# cgroup mounts, a place to write outside /tmp and the workspace (found in review, 2026-11-28).
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger", "/sys/fs/cgroup"]
# The host's out-of-memory killer takes a sandbox's processes before the host's own. Also: crun
# applies no oom_score_adj of 0 (the engine's default), so a sandbox kept the containerd shim's
# value, which a systemd host sets well below 0, protecting the sandbox (found in review).
OOM_SCORE_ADJ = 500


def create_kwargs(cfg, labels: dict[str, str], runtime: str | None = None) -> tuple[dict, dict]:
    """(container, host_config) arguments for docker-py's low-level create_container() that
    realise `cfg` (a SandboxConfig, or anything with its fields): the hardened profile unless a
    loosening field says otherwise. runtime: the one to use where cfg names none (runtimes.chosen)."""
    lim = limit_values(cfg.limits)
    runtime = cfg.runtime or runtime
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
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={lim['tmpfs']},mode=1777",
               **{path: f"{TMPFS_BASE},size={lim['tmpfs']},{opts}".rstrip(",") for path, opts in cfg.tmpfs.items()}},
        pids_limit=host_pids_limit(lim["pids"], runtime),
        mem_limit=lim["memory"],
        memswap_limit=lim["memory"],
        nano_cpus=int(lim["cpus"] * 1e9) if lim["cpus"] else None,
        init=cfg.init,
        mounts=[bind_mount(m) for m in cfg.mounts],
        ipc_mode="private",
        # Nothing a sandbox writes to its stdio reaches the engine's log (unbounded on the host's
        # disk, past tmpfs and quota, and unredacted): runner reads the stdio over attach/exec.
        log_config={"type": "none", "config": {}},
        readonly_paths=list(READONLY_PATHS),
        oom_score_adj=OOM_SCORE_ADJ,
    )
    if runtime:
        host["runtime"] = runtime
    if cfg.shm_size:
        host["shm_size"] = cfg.shm_size
    if cfg.gpus:
        host["device_requests"] = [device_request(cfg.gpus)]
    if cfg.dns is not None:
        host["dns"] = list(cfg.dns)
    container = dict(image=cfg.image, user=cfg.user, environment=dict(cfg.env), labels=labels,
                     working_dir=cfg.workdir, network_disabled=cfg.network == "none")
    if cfg.entrypoint is not None:
        container["entrypoint"] = list(cfg.entrypoint)
    if cfg.publish:  # the engine's own port bindings: a network with egress only (publish.py)
        container["ports"], host["port_bindings"] = publish_bindings(cfg.publish)
    return container, host


# Every extra tmpfs (--tmpfs PATH[:OPTS]) is mounted with these first, its size the sandbox's
# tmpfs limit unless OPTS gives one; OPTS may add only TMPFS_OPTIONS (no suid, no dev).
TMPFS_BASE = "rw,nosuid,nodev,noexec"
TMPFS_OPTIONS = ("size", "mode", "uid", "gid", "exec", "noexec", "ro", "rw", "nr_inodes")


def check_tmpfs(spec: str, force: bool = False) -> tuple[str, str]:
    """'PATH[:OPTS]' -> (path, opts); ValueError for a relative path, one over the kernel's trees
    (/proc, /sys, /dev: it would hide what they hold read-only) unless forced, or an option not
    in TMPFS_OPTIONS."""
    path, _, opts = spec.partition(":")
    if not path.startswith("/") or path.rstrip("/") in ("", "/tmp") or ".." in path.split("/"):
        raise ValueError(f"bad --tmpfs {spec!r}: give an absolute path in the container (not /, not /tmp)")
    if not force and any(path == t or path.startswith(t + "/") for t in ("/proc", "/sys", "/dev")):
        raise ValueError(f"refusing a tmpfs over {path}: it would hide what the kernel's trees hold read-only; "
                         "force it only if you mean it (--force-unsafe-mounts)")
    for o in filter(None, opts.split(",")):
        if o.split("=", 1)[0] not in TMPFS_OPTIONS:
            raise ValueError(f"bad --tmpfs option {o!r}: use {', '.join(TMPFS_OPTIONS)} (tmpfs is always nosuid,nodev)")
    return path, opts


def publish_bindings(ports) -> tuple[dict, dict]:
    """(ExposedPorts, PortBindings) of (ip, host port, container port) triples."""
    exposed = {f"{port}/tcp": {} for _, _, port in ports}
    bound: dict[str, list] = {}
    for ip, host_port, port in ports:
        bound.setdefault(f"{port}/tcp", []).append({"HostIp": ip, "HostPort": str(host_port or "")})
    return exposed, bound


def device_request(gpus: str) -> dict:
    """`--gpus all|N|device=ID[,ID...]` as the engine's DeviceRequest (docker's own grammar)."""
    if gpus == "all":
        return {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    if gpus.isdigit() and int(gpus) > 0:
        return {"Driver": "", "Count": int(gpus), "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    if gpus.startswith("device=") and all(gpus[len("device="):].split(",")):
        return {"Driver": "", "Count": 0, "DeviceIDs": gpus[len("device="):].split(","), "Capabilities": [["gpu"]],
                "Options": {}}
    raise ValueError(f"bad --gpus {gpus!r}: use all, a number, or device=ID[,ID...]")


def bind_mount(m) -> dict:
    """A bind mount as the engine takes it (what docker.types.Mount(type="bind") holds)."""
    return {"Target": m.target, "Source": m.source, "Type": "bind", "ReadOnly": m.read_only}
