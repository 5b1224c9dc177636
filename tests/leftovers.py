"""What an earlier test run left when it was killed mid-way (SIGKILL, a CI timeout, the end of a
login session), removed before this run starts.

A run that ends normally removes everything it made (each fixture's own teardown). A killed run
cannot: its network namespaces and veth pairs, the dockerd and sshd it started in them (they run
in sessions of their own, so they outlive it), their data-roots, the swarm it made the main
engine manager of (advertised on a veth that may be gone: the next run's worker then fails to
join with "network is unreachable"), and the images it imported. Everything the tests make
carries the owner's pid in its name; what belongs to a pid that is no longer a live process is removed here, and nothing of a
live one is touched (another test run on this machine, a helper's).
"""
from __future__ import annotations

import glob
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

# netns and dir names are PREFIX-<owner pid>; the host side of a veth pair is <short><pid>h
PREFIXES = ("runner-swarm-test", "runner-faults-test")
VETH = re.compile(r"^(rswt|rft)(\d+)h$")
TEST_NETS = ipaddress.ip_network("10.252.0.0/14")  # 10.252-10.255: the tests' veth /30s
OWNED = re.compile(rf"^(?:{'|'.join(PREFIXES)})-(\d+)(?:-.*)?$")
TEST_IMAGES = "runner-test"  # images the tests make: runner-test/NAME:pid<owner pid>
IMAGE_TAG = re.compile(r"^pid(\d+)$")


def owner_alive(pid: int) -> bool:
    """A live process with that pid runs Python (a pytest, a bench): the kernel reuses pids, and
    a pid now given to some other program does not keep a dead run's leftovers alive."""
    try:
        return b"python" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def result_stores(pid: int) -> list[str]:
    """The result stores (runner/controller/output.py) the controller with that pid made and has not removed."""
    from runner.controller.output import DIR_PREFIX

    return glob.glob(os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}{pid}[.-]*"))


def _run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, timeout=timeout)


def _dead_owner(name: str) -> bool:
    m = OWNED.match(name)
    return m is not None and not owner_alive(int(m.group(1)))


def _kill_in_netns(ns_file: Path) -> None:
    """SIGKILL every process whose network namespace is that one (found by inode, never by name)."""
    try:
        ino = ns_file.stat().st_ino
    except OSError:
        return
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if os.stat(f"/proc/{d}/ns/net").st_ino == ino:
                    os.kill(int(d), signal.SIGKILL)
            except OSError:
                continue


def _kill_naming(path: Path) -> None:
    """SIGKILL every process with that directory (or a path under it) on its command line: a
    private dockerd, its containerd and shims."""
    needle = str(path).encode()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                args = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a == needle or a.startswith(needle + b"/") for a in args):
                try:
                    os.kill(int(d), signal.SIGKILL)
                except OSError:
                    pass


def remove_tree(root: Path) -> None:
    """Unmount what is mounted under root (deepest first), then remove it."""
    prefix = str(root)
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    for p in sorted((p for p in points if p == prefix or p.startswith(prefix + "/")), key=len, reverse=True):
        _run("umount", "-l", p)
    shutil.rmtree(root, ignore_errors=True)


def sweep_namespaces() -> list[str]:
    removed = []
    for name in sorted(os.listdir("/var/run/netns")) if os.path.isdir("/var/run/netns") else []:
        if _dead_owner(name):
            _kill_in_netns(Path("/var/run/netns") / name)
            _run("ip", "netns", "del", name)
            removed.append(f"netns {name}")
    for link in os.listdir("/sys/class/net"):
        m = VETH.match(link)
        if m and not owner_alive(int(m.group(2))):
            _run("ip", "link", "del", link)
            removed.append(f"link {link}")
    return removed


def sweep_dirs() -> list[str]:
    removed = []
    for parent in (Path("/run"), Path("/var/lib"), Path("/tmp")):
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for d in entries:
            if d.is_dir() and not d.is_symlink() and _dead_owner(d.name):
                _kill_naming(d)
                time.sleep(0.1)  # SIGKILLed shims let go of their mounts
                remove_tree(d)
                removed.append(f"dir {d}")
    return removed


def _local_addresses() -> set[str]:
    out = _run("ip", "-j", "-4", "addr").stdout
    return {a["local"] for link in json.loads(out or b"[]") for a in link.get("addr_info", [])}


def sweep_swarm() -> list[str]:
    """The main engine left manager of a swarm a killed test run made: advertised on a test veth
    address that no interface of this machine has any more. A swarm of anyone else (another
    address range) or of a live run (its veth is up) is left alone."""
    res = _run("docker", "info", "--format", "{{json .Swarm}}", timeout=30)
    if res.returncode != 0:
        return []
    info = json.loads(res.stdout or b"{}")
    addr = info.get("NodeAddr") or ""
    if info.get("LocalNodeState") != "active" or not addr:
        return []
    try:
        if ipaddress.ip_address(addr) not in TEST_NETS:
            return []
    except ValueError:
        return []
    if addr in _local_addresses():
        return []
    _run("docker", "swarm", "leave", "--force", timeout=120)
    gw = _run("docker", "network", "inspect", "docker_gwbridge", "--format", "{{len .Containers}}")
    if gw.returncode == 0 and gw.stdout.strip() == b"0":
        _run("docker", "network", "rm", "docker_gwbridge")
    return [f"swarm advertised on {addr}"]


def sweep_images() -> list[str]:
    """The images the tests import under `runner-test/`, tagged `pid<owner>` (the busybox one of
    tests/integration/cli/conftest.py), whose run is dead."""
    res = _run("docker", "images", "--filter", f"reference={TEST_IMAGES}/*", "--format", "{{.Repository}}:{{.Tag}}",
               timeout=30)
    removed = []
    for ref in res.stdout.decode().split() if res.returncode == 0 else []:
        m = IMAGE_TAG.match(ref.rsplit(":", 1)[-1])
        if m and not owner_alive(int(m.group(1))) and _run("docker", "rmi", "--force", ref).returncode == 0:
            removed.append(f"image {ref}")
    return removed


def sweep(engine: bool = True) -> list[str]:
    """Remove every leftover of dead test runs; return what was removed (for the log)."""
    if os.geteuid() != 0:
        return []
    removed = sweep_namespaces() + sweep_dirs()
    if engine:
        removed += sweep_swarm() + sweep_images()
    return removed
