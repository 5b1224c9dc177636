"""The agent's direct channel on a local engine: a unix socket the controller listens on, in a
directory of its own mounted read-only into the sandbox.

Through the engine's attach stream every line takes two extra copies each way (dockerd and the
container's shim): a round trip of one line cost 0.58 ms after a pause against 0.17 ms over a
socket (measured side by side, same container). So where the engine runs containers on this very
machine (runc), the agent connects to this socket right after the hello and the protocol moves
there; the hello itself (with its key) still comes over stdin, and every line on the socket is
MAC'd as on stdio (agent/wire.py).

Nothing else may use the socket:
- the directories live under /run/runner-channel (root's, 0711, not sticky); each sandbox's is
  root's too (0711: nobody lists or renames it), and only the socket in it is the sandbox user's
  (0600): no other host user can connect; the directory is mounted read-only in the sandbox;
- the controller accepts one connection, then removes the socket and its directory: nothing in
  the sandbox can connect later;
- the connection must come from a process of that sandbox's own container (its peer's cgroup),
  and its first line must be the agent's hello answer, MAC'd with the key only the agent was
  given; the controller sends nothing on it before that;
- a directory left by a controller killed before its agent connected is removed by `runner gc`
  once that process is gone (each is named after its owner's pid).
Where the engine does not run on this machine (a VM, another host, a controller in a container),
under another runtime (gVisor's gofer passes no host socket through), or for a controller that
is not root, the protocol stays on stdio. An agent that cannot connect anyway answers the hello
on stdio and says why; a create that fails on the mount is retried on stdio, and that engine is
not offered the socket again by this process.
"""
from __future__ import annotations

import os
import shutil
import socket
import struct
import threading

from . import piddirs

BASE = "/run/runner-channel"  # short: a socket path has 108 bytes at most
SANDBOX_DIR = "/run/runner-channel"
NAME = "agent.sock"
SANDBOX_PATH = f"{SANDBOX_DIR}/{NAME}"

_engines: dict[str, bool] = {}  # engine address -> whether it runs containers on this machine
_engines_lock = threading.Lock()


class Listener:
    """One sandbox's socket, listening until the agent connects."""

    def __init__(self, owner: tuple[int, int]) -> None:
        os.makedirs(BASE, mode=0o711, exist_ok=True)
        st = os.lstat(BASE)
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise OSError(f"{BASE} is not root's alone (owner {st.st_uid}, mode {st.st_mode & 0o777:o})")
        self.dir = piddirs.make("", BASE)
        self.path = os.path.join(self.dir, NAME)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.chmod(self.dir, 0o711)
            self.sock.bind(self.path)
            os.chmod(self.path, 0o600)
            os.chown(self.path, *owner)
            self.sock.listen(1)
        except BaseException:
            self.close()
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def accept(self) -> socket.socket:
        """The one connection (call when the listener is readable); the socket and its
        directory are removed at once."""
        try:
            conn, _ = self.sock.accept()
        finally:
            self.close()
        conn.setblocking(True)
        return conn

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def peer_pid(conn: socket.socket) -> int:
    pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid


def in_container(pid: int, container_id: str) -> bool:
    """Whether process `pid` (of this machine) runs in that container: its cgroup names it."""
    if pid <= 0 or not container_id:
        return False
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return container_id in f.read()
    except OSError:
        return False


def usable(engine: str, runtime: str | None, info=None) -> bool:
    """Whether sandboxes on this engine can reach a socket of this machine: the engine is
    reached over a unix socket, runs its containers on this very machine (its host name and
    kernel are ours: not a VM, not another host, not from inside a container), with a runtime
    that shares this kernel (runc, crun), and this process is root (it makes /run/runner-channel and
    hands a socket to the sandbox's user). `info`: the engine's `docker info`, asked once per
    engine address and process when not given."""
    if engine and not engine.startswith("unix://"):
        return False
    if runtime not in (None, "", "runc", "crun") or os.geteuid() != 0:
        return False
    with _engines_lock:
        known = _engines.get(engine)
    if known is None:
        from ..backends.docker import engine_on_this_machine

        known = engine_on_this_machine(engine, info)
        if known is None:  # the engine could not say (asked again next time)
            return False
        with _engines_lock:
            _engines[engine] = known
    return known


def refuse(engine: str) -> None:
    """This engine could not mount a channel's directory: offer it none again."""
    with _engines_lock:
        _engines[engine] = False


def sweep(dry_run: bool = False) -> list[tuple[str, str]]:
    """The directories of controllers that are gone (killed before their agent connected),
    removed unless dry_run: (path, why) of each."""
    return piddirs.sweep(BASE, "", dry_run)
