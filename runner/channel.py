"""The agent's direct channel on a local engine: a unix socket the controller listens on, in a
directory of its own mounted read-only into the sandbox.

Through the engine's attach stream every line takes two extra copies each way (dockerd and the
container's shim): a round trip of one line cost 0.58 ms after a pause against 0.17 ms over a
socket (measured side by side, same container). So where the engine shares this machine's kernel
(a local engine, runc), the agent connects to this socket right after the hello and the protocol
moves there; the hello itself (with its key) still comes over stdin, and every line on the socket
is MAC'd as on stdio (toolbox/wire.py).

Nothing else may use the socket:
- the directory is made for one sandbox, owned by the sandbox's user, mode 0700 (no other host
  user can reach it), and mounted read-only (the sandbox cannot leave anything in it);
- the controller accepts one connection, then removes the socket and its directory: nothing in
  the sandbox can connect later, and nothing is left on the host, even after a SIGKILL past that;
- the first line on the connection must be the agent's hello answer, authenticated with the key
  only the agent was given; the controller sends nothing on it before that.
Where the agent cannot connect (an engine in a VM, a runtime that does not pass host sockets
through), it answers the hello on stdio and says why: the sandbox works as before.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile

SANDBOX_DIR = "/run/runner-channel"
NAME = "agent.sock"
SANDBOX_PATH = f"{SANDBOX_DIR}/{NAME}"


class Listener:
    """One sandbox's socket, listening until the agent connects."""

    def __init__(self, owner: tuple[int, int]) -> None:
        self.dir = tempfile.mkdtemp(prefix="runner-channel-")  # mode 0700
        self.path = os.path.join(self.dir, NAME)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(self.path)
            self.sock.listen(1)
            os.chmod(self.path, 0o600)
            if owner != (os.geteuid(), os.getegid()):
                os.chown(self.path, *owner)
                os.chown(self.dir, *owner)
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


def usable(engine: str, runtime: str | None, owner: tuple[int, int]) -> bool:
    """Whether a sandbox on this engine can reach a socket of this machine: the engine is local
    (a unix socket), its runtime shares this kernel (runc; gVisor's gofer does not pass host
    sockets through), and this process can hand the directory to the sandbox's user."""
    if engine and not engine.startswith("unix://"):
        return False
    if runtime not in (None, "", "runc"):
        return False
    return os.geteuid() == 0 or owner == (os.geteuid(), os.getegid())
