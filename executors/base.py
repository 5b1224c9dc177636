"""The Executor interface: one abstract class; one small module per backend.

A backend implements `spawn` (start one command with pipes, get a Process back) plus its
lifecycle (`start`/`stop`). Everything else — streaming, stdin feeding, timeouts that kill the
whole process tree, and file transfer — is built here once on top of `spawn`, so every backend
behaves the same and passes the same conformance battery (tests/conformance).
"""
from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from typing import BinaryIO, Callable, Iterator

from .models import OOM_EXIT, TIMEOUT_EXIT, ExecRequest, ExecResult

OutputCallback = Callable[[str, bytes], None]
"""Called with ("stdout" | "stderr", chunk) as output arrives."""

_EOF = ("eof", b"")
KILL_GRACE = 2.0  # seconds to drain output after a kill before giving up on the pipes


class Process(ABC):
    """A command running in a sandbox, with its stdin open and its output queued.

    Backends start reader threads with `_start_readers`; EOF is queued once every output stream
    is closed. The queue is bounded, so a fast producer blocks on a slow consumer
    instead of filling memory.
    """

    def __init__(self, queue_chunks: int = 64) -> None:
        self._q: queue.Queue[tuple[str, bytes]] = queue.Queue(maxsize=queue_chunks)
        self._open_streams = 0
        self._lock = threading.Lock()
        self.eof = False

    # -- filled by backends -------------------------------------------------------------
    def _start_readers(self, readers: dict[str, Callable[[], bytes]]) -> None:
        """Start one thread per stream that pushes chunks from read() until it returns b''.

        All streams are counted before any thread starts, so EOF is queued only after the last.
        """
        self._open_streams = len(readers)
        for stream, read in readers.items():
            threading.Thread(target=self._pump, args=(stream, read), name=f"runner-{stream}",
                             daemon=True).start()

    def _pump(self, stream: str, read: Callable[[], bytes]) -> None:
        try:
            while True:
                try:
                    data = read()
                except (OSError, ValueError):
                    data = b""
                if not data:
                    break
                self._q.put((stream, data))
        finally:
            with self._lock:
                self._open_streams -= 1
                last = self._open_streams == 0
            if last:
                self._q.put(_EOF)

    def _push(self, stream: str, data: bytes) -> None:
        self._q.put((stream, data))

    # -- used by callers ----------------------------------------------------------------
    def read(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        """Next (stream, chunk); ("eof", b"") once all output is read; None if nothing came in time."""
        if self.eof:
            return _EOF
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _EOF or item[0] == "eof":
            self.eof = True
        return item

    def output(self) -> Iterator[tuple[str, bytes]]:
        """Iterate over output chunks until EOF (no timeout)."""
        while True:
            item = self.read()
            if item is None or item[0] == "eof":
                return
            yield item

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Write to the command's stdin."""

    @abstractmethod
    def close_stdin(self) -> None:
        """Close the command's stdin (EOF for the reader)."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Exit status once the command has ended; None if it still runs after `timeout`."""

    @abstractmethod
    def kill(self) -> None:
        """Kill the command and every process in its process group / tree."""

    def oom_killed(self) -> bool:
        """Whether the sandbox's memory limit killed something of this command."""
        return False

    def gone(self) -> bool:
        """Whether the sandbox under the command has died (asked after a second of silence,
        so a dead sandbox whose transport stays open cannot hang a call)."""
        return False

    def close(self) -> None:
        """Release transport resources (sockets, channels). Idempotent."""


class Executor(ABC):
    """Where commands run. A context manager: `with DockerExecutor(...) as ex: ex.exec(req)`."""

    name: str = "abstract"

    def __enter__(self) -> "Executor":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Make the sandbox ready. Idempotent."""

    def stop(self) -> None:
        """Tear the sandbox down and release everything it holds. Idempotent."""

    @abstractmethod
    def spawn(self, req: ExecRequest) -> Process:
        """Start req.argv and return at once with a Process (stdin open, output queued)."""

    # -- built once for every backend ---------------------------------------------------
    def exec(
        self,
        req: ExecRequest,
        *,
        stdin: BinaryIO | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run one command to completion.

        stdin: req.stdin (bytes) or a binary stream copied as it is read (not both).
        on_output: called with each chunk as it arrives; output is then not kept in the result.
        A timeout kills the whole process tree and gives exit code 124 with timed_out set.
        """
        if stdin is not None and req.stdin is not None:
            raise ValueError("give stdin either in the request or as a stream, not both")
        started = time.monotonic()
        proc = self.spawn(req)
        out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        sink = on_output or (lambda stream, data: out[stream].append(data))
        deadline = None if req.timeout is None else started + req.timeout
        timed_out = False
        feeder = None
        try:  # from here on, any exit (Ctrl-C included) kills the command and releases it
            feeder = _feed_stdin(proc, req.stdin, stdin)
            kill_deadline = None
            last_probe = time.monotonic()
            while True:
                now = time.monotonic()
                if not timed_out and deadline is not None and now >= deadline:
                    timed_out = True
                    proc.kill()
                    kill_deadline = now + KILL_GRACE
                if kill_deadline is not None and now >= kill_deadline:
                    break  # something outside the group holds the pipes open; stop waiting
                wait = 0.25
                if deadline is not None and not timed_out:
                    wait = min(wait, deadline - now)
                if kill_deadline is not None:
                    wait = min(wait, kill_deadline - now)
                item = proc.read(timeout=max(0.001, wait))
                if item is None:
                    if time.monotonic() - last_probe >= 1.0:
                        last_probe = time.monotonic()
                        if proc.gone():
                            break
                    continue
                last_probe = time.monotonic()
                stream, data = item
                if stream == "eof":
                    break
                sink(stream, data)
            code = proc.wait(timeout=KILL_GRACE if timed_out or proc.gone() else None)
            if code is None:
                proc.kill()
                code = proc.wait(timeout=KILL_GRACE)
        except BaseException:
            proc.kill()
            raise
        finally:
            if feeder is not None:
                feeder.join(timeout=0.1)
            proc.close()
        oom = False
        if timed_out:
            code = TIMEOUT_EXIT
        elif code is None or code == OOM_EXIT or (code >= 128 and proc.gone()):
            # gVisor ends the whole sandbox on an OOM, and exec then reports 128 or nothing
            oom = proc.oom_killed()
            if oom:
                code = OOM_EXIT
        return ExecResult(
            exit_code=code if code is not None else OOM_EXIT if oom else -1,
            stdout=b"".join(out["stdout"]),
            stderr=b"".join(out["stderr"]),
            timed_out=timed_out,
            oom_killed=oom,
            duration=time.monotonic() - started,
        )

    def run(self, argv: list[str], **kw) -> ExecResult:
        """Shorthand: exec(ExecRequest(argv=argv, **kw))."""
        return self.exec(ExecRequest(argv=argv, **kw))

    # Files: a default built on exec with POSIX sh and cat, so it works in any image with a
    # shell, over any transport. Backends with direct access override it.
    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write `data` to `path` in the sandbox, creating parent directories."""
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'
        res = self.exec(ExecRequest(argv=["sh", "-c", script, "sh", path, f"{mode:o}"], stdin=data))
        if res.exit_code != 0:
            raise OSError(f"put_file {path}: {res.stderr.decode(errors='replace').strip()}")

    def get_file(self, path: str) -> bytes:
        """Read the file at `path` in the sandbox."""
        res = self.exec(ExecRequest(argv=["cat", "--", path]))
        if res.exit_code != 0:
            raise FileNotFoundError(f"get_file {path}: {res.stderr.decode(errors='replace').strip()}")
        return res.stdout


def _feed_stdin(proc: Process, data: bytes | None, stream: BinaryIO | None) -> threading.Thread | None:
    """Copy stdin to the process in a thread, then close it. No stdin: close at once."""
    if data is None and stream is None:
        proc.close_stdin()
        return None

    def run() -> None:
        try:
            if data is not None:
                for i in range(0, len(data), 65536):
                    proc.write(data[i : i + 65536])
            else:
                read = getattr(stream, "read1", stream.read)
                while chunk := read(65536):
                    proc.write(chunk)
        except (OSError, ValueError):
            pass  # the command closed its stdin or ended: nothing more to feed
        finally:
            try:
                proc.close_stdin()
            except OSError:
                pass

    t = threading.Thread(target=run, name="runner-stdin", daemon=True)
    t.start()
    return t
