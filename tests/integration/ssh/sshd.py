"""A real OpenSSH server on a loopback port, started and stopped by the tests."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class Sshd:
    dir: Path
    port: int
    proc: subprocess.Popen | None = None

    @property
    def client_key(self) -> str:
        return str(self.dir / "client")

    @property
    def known_hosts(self) -> str:
        return str(self.dir / "known_hosts")

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def argv(self) -> list[str]:
        return [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")]

    def start(self) -> "Sshd":
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=open(self.dir / "sshd.log", "ab"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.dir / 'sshd.log').read_text()[-2000:]}")

    def stop(self) -> None:
        """Kill the server and every connection it serves (sshd forks one process per
        connection, and those outlive the listener)."""
        if self.proc is not None:
            family = descendants(self.proc.pid)
            self.proc.kill()
            for pid in family:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            self.proc.wait()
            self.proc = None


def descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [], [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier]
        out += kids
        frontier = kids
    return out


def make_sshd(tmp: Path) -> Sshd:
    """SetEnv SHLVL=1: bash, run by sshd, then skips root's ~/.bashrc. On these machines it runs
    `pyenv init`, whose rehash takes a lock file that stop()'s SIGKILL can leave behind: every
    later python3 through pyenv's shims then waits 60 s for it (the ssh tests' flake of 17:47)."""
    tmp.mkdir(parents=True, exist_ok=True)
    keygen(tmp / "hostkey")
    keygen(tmp / "client")
    keygen(tmp / "other")
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    port = free_port()
    (tmp / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {tmp}/hostkey
PidFile {tmp}/sshd.pid
AuthorizedKeysFile {tmp}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
SetEnv SHLVL=1
""")
    host_pub = (tmp / "hostkey.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    return Sshd(tmp, port)
