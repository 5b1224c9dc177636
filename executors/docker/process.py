"""Processes in Docker: a command run by `docker exec`, or a container's own main process.

Both speak over a hijacked HTTP connection carrying Docker's multiplexed stream (wire.Frames
reads it).
"""
from __future__ import annotations

import socket
import threading
import time

from ..base import _EOF, Process
from ..defaults import OOM_EXIT
from ..errors import EngineUnavailable, SandboxGone
from ..posix import KILL_SESSION, PID_LINE_MAX
from .wire import Frames

# A POSIX-sh wrapper that reports its pid on stderr before it becomes the command, as the leader
# of a session of its own (so also of its process group): a timeout can then kill the whole
# session from inside the container (posix.KILL_SESSION). runc makes each `docker exec` a session
# leader; crun leaves it in the runtime's session (session and group 0 inside the container), and
# there the wrapper calls setsid(1) (util-linux's and busybox's call setsid() with no fork for a
# process that leads no group, so the pid it reported stays the command's). Read from /proc with
# shell builtins only; `--`: a command named like an option of setsid is the command. Works in any
# image with /bin/sh (busybox too); where no setsid is found the command leads no session, and a
# timeout kills the command itself but not its children (posix.KILL_SESSION).
PID_WRAPPER = ["/bin/sh", "-c", 'echo "$$" >&2; '
               'l() { set -f; set -- ${1##*) }; [ "$3" = "$$" ] || [ "$4" = "$$" ]; }; '
               'if read -r s </proc/$$/stat && ! l "$s" && command -v setsid >/dev/null; then exec setsid -- "$@"; fi; '
               'exec "$@"', "runner-exec"]


def _raw(sock):
    """The real socket behind docker-py's SocketIO wrapper."""
    return getattr(sock, "_sock", sock)


class DockerStreamProcess(Process):
    """Common part: demultiplex the socket in one thread; stdin goes to the same socket."""

    def __init__(self, sock, strip_pid_line: bool = False, early: bytes = b"") -> None:
        super().__init__()
        self.sock = _raw(sock)
        self._early = early  # what was read past the engine's headers (wire.Engine.hijack)
        self.pid: int | None = None
        self._pid_known = threading.Event()
        if not strip_pid_line:
            self._pid_known.set()
        self._pending_stderr = bytearray() if strip_pid_line else None
        self._closed = False
        threading.Thread(target=self._demux, name="runner-docker-demux", daemon=True).start()

    def _demux(self) -> None:
        mux = Frames(self.sock, self._early)
        try:
            while (item := mux.frame()) is not None:
                stream, data = item
                if stream == "stderr" and self._pending_stderr is not None:
                    self._pending_stderr += data
                    if b"\n" not in self._pending_stderr and len(self._pending_stderr) <= PID_LINE_MAX:
                        continue
                    head = bytes(self._pending_stderr)
                    self._pending_stderr = None
                    line, nl, rest = head.partition(b"\n")
                    try:
                        if not nl or len(line) > PID_LINE_MAX:
                            raise ValueError(line)
                        self.pid = int(line)
                    except ValueError:
                        rest = head  # not our line: the wrapper did not run
                    self._pid_known.set()
                    if not rest:
                        continue
                    data = rest
                self._q.put((stream, data))
        finally:
            if self._pending_stderr:
                self._q.put(("stderr", bytes(self._pending_stderr)))
            self._pid_known.set()
            self._q.put(_EOF)

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close_stdin(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def ended(self) -> bool:
        """The engine hung up this stream (the container ended, or the engine itself did). Asks
        the kernel, not the reader thread, so the answer holds from the moment it happened."""
        import select

        if self._closed:
            return True
        try:
            p = select.poll()
            p.register(self.sock, select.POLLRDHUP)
            return bool(p.poll(0))  # POLLRDHUP, or POLLHUP/POLLERR, which poll always reports
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.sock.close()
            except OSError:
                pass


RUNTIME_FAILED = 128  # what docker exec reports when the runtime lost the process
KILL_WITHIN = 15.0  # seconds to keep starting the killer while the session is not yet gone


class ExecProcess(DockerStreamProcess):
    """A command started with `docker exec` in a running sandbox container."""

    def __init__(self, client, container_id: str, exec_id: str, sock, user: str | None, started: float) -> None:
        self.client = client
        self.container_id = container_id
        self.exec_id = exec_id
        self.user = user
        self.started = started
        self._code: int | None = None
        self._gone = False
        super().__init__(sock, strip_pid_line=True)

    def wait(self, timeout: float | None = None) -> int | None:
        import docker.errors

        if self._code is not None:
            return self._code
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                info = self.client.api.exec_inspect(self.exec_id)
            except docker.errors.NotFound:
                info = {"Running": False, "ExitCode": None}
            except Exception as e:
                raise engine_lost(e) from None
            if not info.get("Running") or self.gone():
                code = info.get("ExitCode")
                self._code = 137 if code is None else code  # no code: the sandbox died under it
                if code == RUNTIME_FAILED:
                    self._settle()
                return self._code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def kill(self) -> None:
        """Kill the command's whole session and return once none of it is left (reaped too), so
        the next exec finds the pids it held free. Under a fork bomb the pids limit can refuse
        the killer's own exec: it is started again until it reports the session gone."""
        self._pid_known.wait(timeout=2)
        if self.pid is None:
            return
        deadline = time.monotonic() + KILL_WITHIN
        while True:
            try:
                ex = self.client.api.exec_create(self.container_id,
                                                  ["/bin/sh", "-c", KILL_SESSION, "kill", str(self.pid)],
                                                  user=self.user or "")
                self.client.api.exec_start(ex["Id"])
                if self.client.api.exec_inspect(ex["Id"]).get("ExitCode") == 0:
                    return
            except Exception:
                if self.gone():  # the container is gone: so is the process
                    return
            if time.monotonic() >= deadline or self.gone():
                return
            time.sleep(0.05)

    def oom_killed(self) -> bool:
        return _oom_event(self.client, self.container_id, self.started)

    def _settle(self, within: float = 2.0) -> None:
        """After the runtime's own failure code, give the engine a moment to see the container
        die: gVisor answers an exec with 128 when an OOM ends the whole sandbox, and the engine
        may still call the container running for a few hundred milliseconds (seen here: 1 run
        in 3), which made an OOM look like a plain exit code 128."""
        deadline = time.monotonic() + within
        while not self.gone() and time.monotonic() < deadline:
            time.sleep(0.05)

    def gone(self) -> bool:
        """The container under this exec is no longer running (gVisor, for one, ends the whole
        sandbox on an OOM while `docker exec` keeps its connection open)."""
        if self._gone:
            return True
        try:
            state = self.client.api.inspect_container(self.container_id)["State"]
            self._gone = not state.get("Running")
        except Exception:
            self._gone = True
        return self._gone


class ContainerProcess(DockerStreamProcess):
    """A container whose main process is the command (`docker run --rm` style); removed on close."""

    def __init__(self, container, sock, started: float) -> None:
        self.container = container
        self.started = started
        self._code: int | None = None
        super().__init__(sock)

    def wait(self, timeout: float | None = None) -> int | None:
        if self._code is not None:
            return self._code
        import docker.errors

        try:
            res = self.container.wait(timeout=timeout if timeout is not None else None)
        except docker.errors.NotFound:  # removed under us: it was killed
            self._code = 137
            return self._code
        except Exception as e:  # requests' ReadTimeout / ConnectionError
            if "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower():
                return None
            raise engine_lost(e) from None
        self._code = res.get("StatusCode")
        return self._code

    def kill(self) -> None:
        try:
            self.container.kill()
        except Exception:
            pass

    def oom_killed(self) -> bool:
        try:
            self.container.reload()
            if self.container.attrs["State"].get("OOMKilled"):
                return True
        except Exception:
            pass
        return _oom_event(self.container.client, self.container.id, self.started)

    def close(self) -> None:
        super().close()
        import docker.errors

        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except Exception:
            pass  # still there, maybe: the executor's stop() looks for it by its labels


class ContainerRef:
    """A container by its id, where docker-py's model is not there (EngineContainerProcess)."""

    def __init__(self, cid: str) -> None:
        self.id = cid
        self.short_id = cid[:12]


class EngineContainerProcess(DockerStreamProcess):
    """ContainerProcess on a local engine, over wire.py: the same promises, without docker-py (its
    import, and the requests and urllib3 under each request, on every sandbox's start)."""

    def __init__(self, engine, cid: str, sock, early: bytes, started: float) -> None:
        self.engine = engine
        self.container = ContainerRef(cid)
        self.started = started
        self._code: int | None = None
        self._oom: bool | None = None  # the engine's OOMKilled, asked before the removal (close)
        super().__init__(sock, early=early)

    def wait(self, timeout: float | None = None) -> int | None:
        from .wire import EngineRefused

        if self._code is not None:
            return self._code
        try:  # (a socket's timeout of 0 would make it non-blocking: a short wait instead)
            res = self.engine.json("POST", f"/containers/{self.container.id}/wait",
                                   timeout=None if timeout is None else max(timeout, 0.01))
        except EngineRefused as e:
            if e.status == 404:  # removed under us: it was killed
                self._code = 137
                return self._code
            raise
        except TimeoutError:
            return None
        except (EngineUnavailable, OSError):  # (OSError: it hung up, or reset the connection)
            raise SandboxGone("the Docker engine stopped answering (stopped or restarted?), and the sandbox "
                              "with it") from None
        self._code = res.get("StatusCode") if isinstance(res, dict) else None
        return self._code

    def kill(self) -> None:
        try:
            self.engine.json("POST", f"/containers/{self.container.id}/kill")
        except Exception:
            pass

    def oom_killed(self) -> bool:
        """The engine's OOMKilled (asked before the removal, if close() came first: Executor._exec
        asks after it), else an oom event since the start."""
        from .oneshot import oom_killed_since

        return bool(self._oom) or oom_killed_since(self.engine, self.container.id, self.started)

    def close(self) -> None:
        super().close()
        from .oneshot import oom_flag, remove_container

        if self._oom is None and (self._code is None or self._code == OOM_EXIT):  # (what an OOM kill ends with)
            self._oom = oom_flag(self.engine, self.container.id)
        remove_container(self.engine, self.container.id)


def engine_lost(e: Exception) -> Exception:
    """SandboxGone when `e` says the engine itself stopped answering (stopped, restarted, its
    socket gone), so the caller reads what happened instead of a transport's error; else e."""
    import requests.exceptions

    if isinstance(e, requests.exceptions.ConnectionError):
        from ..errors import SandboxGone

        return SandboxGone("the Docker engine stopped answering (stopped or restarted?), and the sandbox with it "
                           f"({type(e).__name__})")
    return e


def _oom_event(client, container_id: str, since: float) -> bool:
    """Did the engine report an OOM kill in this container since `since` (wall clock)?"""
    try:
        events = client.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                               filters={"container": container_id, "event": "oom"})
        return any(True for _ in events)
    except Exception:
        return False
