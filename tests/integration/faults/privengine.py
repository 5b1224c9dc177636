"""A private Docker engine that a fault test may stop, kill and restart: its own socket,
data-root, exec-root, pidfile and containerd (dockerd starts one under its exec-root), no
iptables, no bridge, and a network namespace of its own. Every path carries the prefix runner-faults-test, so nothing of it can be
mistaken for the machine's main engine, which other tests use meanwhile."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ...leftovers import remove_tree

PREFIX = "runner-faults-test"
DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
READY_WITHIN = 120.0  # seconds: a start that takes longer is a broken engine, not a slow one


class PrivateEngine:
    def __init__(self, root: str | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix=f"{PREFIX}-{os.getpid()}-", dir="/tmp"))
        self.sock = self.root / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        r = self.root
        # In a network namespace of its own: dockerd with --bridge=none deletes any link named
        # docker0 it sees, which in the machine's namespace is the main engine's bridge. The
        # private engine is reached over its unix socket and its sandboxes have no network.
        return ["unshare", "--net", "--", DOCKERD, "-H", self.url, "--data-root", str(r / "data"), "--exec-root", str(r / "exec"),
                "--pidfile", str(r / "dockerd.pid"), "--iptables=false", "--ip6tables=false", "--bridge=none",
                "--containerd-namespace", PREFIX, "--containerd-plugins-namespace", f"{PREFIX}-plugins",
                "--log-level", "warn"]

    def start(self) -> "PrivateEngine":
        """Start dockerd and return once it answers (or raise with its log)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        drop_stale_containerd_pid(self.root / "exec" / "containerd")
        log = open(self.root / "dockerd.log", "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.answers():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"private dockerd did not start: {self.log()[-3000:]}")

    def answers(self) -> bool:
        r = subprocess.run(["docker", "-H", self.url, "version", "--format", "{{.Server.Version}}"],
                           capture_output=True, timeout=30)
        return r.returncode == 0

    def stop(self) -> None:
        """`systemctl stop docker`: SIGTERM, and wait until dockerd has exited (it stops its
        containers and its containerd first)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def docker(self, *args: str, input: bytes | None = None, check: bool = True) -> str:
        r = subprocess.run(["docker", "-H", self.url, *args], capture_output=True, input=input, timeout=300)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {r.stderr.decode(errors='replace')}")
        return r.stdout.decode()

    def load_from_main(self, image: str) -> None:
        """Copy an image from the machine's main engine (docker save | docker load)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", self.url, "load", "-q"], stdin=save.stdout, capture_output=True,
                              timeout=600)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise RuntimeError(f"could not copy {image} to the private engine: {load.stderr.decode(errors='replace')}")

    def containers(self, *filters: str) -> list[str]:
        """Ids of every container (running or not) matching the label filters."""
        args = ["ps", "-aq", "--no-trunc"] + [a for f in filters for a in ("--filter", f"label={f}")]
        return self.docker(*args).split()

    def log(self) -> str:
        try:
            return (self.root / "dockerd.log").read_text(errors="replace")
        except OSError:
            return ""

    def destroy(self) -> None:
        """Remove every container, stop dockerd, unmount what it left mounted, remove its dirs."""
        if self.proc is not None and self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
        self.stop()
        remove_tree(self.root)


def drop_stale_containerd_pid(state: Path) -> None:
    """Remove containerd.pid unless it names this engine's own containerd. A containerd that is
    gone leaves a pid the kernel may have given to another process since: dockerd would take
    containerd for running and wait for its socket in vain ("timeout waiting for containerd")."""
    pidfile = state / "containerd.pid"
    try:
        pid = int(pidfile.read_text().strip())
        ours = str(state / "containerd.toml").encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        ours = False
    if not ours:
        pidfile.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
