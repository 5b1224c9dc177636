"""The Executor interface: one abstract class; one small module per backend.

A backend implements `spawn` (start one command with pipes, get a Process back) plus its
lifecycle (`start`/`stop`). Everything else — streaming, stdin feeding, timeouts that kill the
whole process tree, and file transfer — is built here once on top of `spawn`, so every backend
behaves the same and passes the same conformance battery (tests/integration/conformance).
"""
from __future__ import annotations

import queue
import threading
import time
import typing
from abc import ABC, abstractmethod
from typing import BinaryIO, Callable, Iterator

from .defaults import start_failure_message
from .errors import ExecCancelled, FileTooLarge, file_error
from .models import OOM_EXIT, TIMEOUT_EXIT, ExecRequest, ExecResult, StartFailure, StartReason

OutputCallback = Callable[[str, bytes], None]
"""Called with ("stdout" | "stderr", chunk) as output arrives."""

_EOF = ("eof", b"")
KILL_GRACE = 2.0  # seconds to drain output after a kill before giving up on the pipes
MAX_GET_FILE = 100 * 1024**2  # get_file's default bound (inspect_ai's default read limit)
FILE_ERROR = b"runner-file-error: "  # how the file scripts below report an errno name on stderr


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
        self.start_failure: StartFailure | None = None  # set by a backend that knows the command never started

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
        """Next (stream, chunk); ("eof", b"") once all output is read; None if nothing came in time.
        Raises nothing: a lost transport ends the output (its "eof")."""
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
        """Iterate over output chunks until EOF (no timeout). Raises nothing."""
        while True:
            item = self.read()
            if item is None or item[0] == "eof":
                return
            yield item

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Write to the command's stdin. Raises OSError (BrokenPipeError once the command closed its
        stdin or ended) or SandboxGone (the sandbox or the connection to it is gone)."""

    @abstractmethod
    def close_stdin(self) -> None:
        """Close the command's stdin (EOF for the reader). Raises nothing: a stdin already closed, or
        a command already gone, is not an error."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Exit status once the command has ended; None if it still runs after `timeout`. Raises
        SandboxGone when the engine or the connection that ran it was lost, so its status can never
        be known."""

    @abstractmethod
    def kill(self) -> None:
        """Kill the command and every process in its process group / tree. Raises nothing: a command
        that already ended, or a sandbox already gone, is not an error."""

    def oom_killed(self) -> bool:
        """Whether the sandbox's memory limit killed something of this command. Raises nothing."""
        return False

    def gone(self) -> bool:
        """Whether the sandbox under the command has died (asked after a second of silence,
        so a dead sandbox whose transport stays open cannot hang a call). Raises nothing."""
        return False

    def ended(self) -> bool:
        """Whether the command's transport has ended (asked without blocking, e.g. of a warm
        sandbox before it is handed out: an engine restart ends it while nobody reads). Raises
        nothing."""
        return self.eof

    def close(self) -> None:
        """Release transport resources (sockets, channels). Idempotent. Raises nothing."""


class FailedProcess(Process):
    """A command that never started: its start failure, exit 127/126 like a shell, the message on stderr."""

    def __init__(self, failure: StartFailure) -> None:
        super().__init__()
        self.start_failure = failure
        self.code = failure.exit_code
        self._push("stderr", failure.message.encode() + b"\n")
        self._push("eof", b"")

    def write(self, data: bytes) -> None:
        raise BrokenPipeError("command did not start")

    def close_stdin(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int | None:
        return self.code

    def kill(self) -> None:
        pass


def start_failure(reason: str, req: ExecRequest) -> StartFailure:
    """The StartFailure for `reason`, with a message naming what the request asked for."""
    return StartFailure(reason=reason, message=start_failure_message(reason, req.argv[0], req.cwd, req.user))


# Run after a command ended with 126/127 to tell "never started" from "ran and exited so":
# checks, in the order the engine and the wrapper shell meet them, the user, the working
# directory and the command. Prints one reason word, or nothing when the command could start.
# $1 command, $2 working directory (may be empty), $3 user[:group] (may be empty).
DIAGNOSE_START = r"""
cmd=$1 cwd=$2 user=$3
if [ -n "$user" ]; then
  u=${user%%:*} g=
  case $user in *:*) g=${user#*:};; esac
  case $u in *[!0-9]*) id -u -- "$u" >/dev/null 2>&1 || { echo unknown-user; exit 0; };; esac
  case $g in *[!0-9]*)
    found=
    while IFS=: read -r name rest; do [ "$name" = "$g" ] && found=1; done < /etc/group
    [ -n "$found" ] || { echo unknown-group; exit 0; };;
  esac
fi
if [ -n "$cwd" ]; then
  if [ ! -d "$cwd" ]; then echo no-cwd; exit 0; fi
  cd -- "$cwd" 2>/dev/null || { echo cwd-denied; exit 0; }
fi
case $cmd in
  */*) p=$cmd ;;
  *) p=$(command -v -- "$cmd" 2>/dev/null) || { echo not-found; exit 0; }
     case $p in */*) ;; *) exit 0 ;; esac ;;
esac
if [ -d "$p" ]; then echo is-directory
elif [ ! -e "$p" ]; then echo not-found
elif [ ! -x "$p" ]; then echo not-executable
fi
"""

# get_file: refuse a directory, a missing, unreadable or non-regular file, or one over the limit
# (by its size, before reading), then send at most limit+1 bytes. $1 path, $2 limit.
GET_FILE = r"""
f=$1 lim=$2
err() { echo "runner-file-error: $1" >&2; exit 3; }
[ -d "$f" ] && err EISDIR
[ -e "$f" ] || err ENOENT
[ -f "$f" ] || err EINVAL
[ -r "$f" ] || err EACCES
size=$(stat -L -c %s -- "$f" 2>/dev/null) && [ "$size" -gt "$lim" ] && err "EFBIG $size"
exec head -c "$((lim + 1))" -- "$f"
"""

# put_file: refuse a directory, a non-regular file, or a place the user may not write, then
# write in place (an existing file keeps its mode and owner); chmod only a new file or when
# a mode is asked for. $1 path, $2 mode in octal or empty.
PUT_FILE = r"""
f=$1 mode=$2
err() { echo "runner-file-error: $1" >&2; exit 3; }
[ -d "$f" ] && err EISDIR
d=$(dirname -- "$f")
if [ ! -d "$d" ]; then
  if ! mkdir -p -- "$d" 2>/dev/null; then
    p=$d
    while [ ! -e "$p" ] && [ ! -L "$p" ]; do p=$(dirname -- "$p"); done
    [ -d "$p" ] && err EACCES
    err ENOTDIR
  fi
fi
new=
if [ -e "$f" ] || [ -L "$f" ]; then
  [ -f "$f" ] || err EINVAL
  [ -w "$f" ] || err EACCES
else
  [ -w "$d" ] || err EACCES
  new=1
fi
cat > "$f" || err EACCES
if [ -n "$mode" ]; then chmod "$mode" "$f" || err EACCES
elif [ -n "$new" ]; then chmod 644 "$f" || err EACCES
fi
"""


def _file_failure(res: ExecResult, path: str) -> OSError | None:
    """The typed error a file script reported (exit 3 and its line on stderr), else None."""
    if res.exit_code != 3 or res.start_failure is not None:
        return None
    for line in res.stderr.splitlines():
        if line.startswith(FILE_ERROR):
            return file_error(line[len(FILE_ERROR):].decode(errors="replace").split()[0], path)
    return None


class Executor(ABC):
    """Where commands run. A context manager: `with DockerExecutor(...) as ex: ex.exec(req)`."""

    name: str = "abstract"

    def __enter__(self) -> "Executor":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Make the sandbox ready. Idempotent. Raises EngineUnavailable (the engine or SSH server
        does not answer), ImageNotFound (never pulled), InvalidConfig (a refused setting), or another
        ExecutorError naming what the backend refused; nothing is left behind when it raises."""

    def stop(self) -> None:
        """Tear the sandbox down and release everything it holds. Idempotent. Raises nothing for a
        sandbox already gone; EngineUnavailable when the engine does not answer to remove it."""

    @abstractmethod
    def spawn(self, req: ExecRequest) -> Process:
        """Start req.argv and return at once with a Process (stdin open, output queued). Raises
        SandboxGone (the sandbox was removed or stopped), EngineUnavailable, ImageNotFound (a
        per-call container's image), InvalidConfig (a request the backend refuses, e.g. another user
        on the local backend). A command that cannot start inside the sandbox is not raised: its
        Process ends with 126/127 (exec says why)."""

    # -- built once for every backend ---------------------------------------------------
    def exec(
        self,
        req: ExecRequest,
        *,
        stdin: BinaryIO | None = None,
        on_output: OutputCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> ExecResult:
        """Run one command to completion.

        stdin: req.stdin (bytes) or a binary stream copied as it is read (not both).
        on_output: called with each chunk as it arrives; output is then not kept in the result.
        cancel: once set, the command's whole process tree is killed and ExecCancelled raised.
        A timeout kills the whole process tree and gives exit code 124 with timed_out set.
        req.max_output bounds each stream: past it the command is killed, output_limited set.
        A command that never started (not found, not executable, unknown user, no working
        directory) gives exit 127/126 with start_failure set and runner's message on stderr.
        Raises ExecCancelled (cancel was set), and what spawn and Process.wait raise.
        """
        res = self._exec(req, stdin=stdin, on_output=on_output, cancel=cancel)
        if res.start_failure is None and res.exit_code in (126, 127) and not res.timed_out and not res.oom_killed:
            failure = self.diagnose_start(req)
            if failure is not None:
                res = res.model_copy(update={"start_failure": failure, "stdout": b"",
                                             "stderr": failure.message.encode() + b"\n",
                                             "exit_code": failure.exit_code})
        return res

    def diagnose_start(self, req: ExecRequest) -> StartFailure | None:
        """After exit 126/127: did req never start, and why? None when it did start (a script
        that itself exited 127 stays the script's result). Runs one short probe as the
        sandbox's default user in its default directory, the request's environment applied. Raises
        nothing: a probe that cannot run gives None."""
        probe = ExecRequest(argv=["/bin/sh", "-c", DIAGNOSE_START, "runner-diagnose", req.argv[0], req.cwd or "",
                                  req.user or ""], env=req.env, timeout=30, max_output=4096)
        try:
            res = self._exec(probe)
        except Exception:
            return None
        word = res.stdout.decode(errors="replace").strip()
        if res.exit_code != 0 or word not in _REASONS:
            return None
        return start_failure(word, req)

    def _exec(self, req: ExecRequest, *, stdin: BinaryIO | None = None, on_output: OutputCallback | None = None,
              cancel: threading.Event | None = None) -> ExecResult:
        if stdin is not None and req.stdin is not None:
            raise ValueError("give stdin either in the request or as a stream, not both")
        if cancel is not None and cancel.is_set():
            raise ExecCancelled(f"cancelled before {req.argv[0]} started")
        started = time.monotonic()
        proc = self.spawn(req)
        out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        sink = on_output or (lambda stream, data: out[stream].append(data))
        sizes = {"stdout": 0, "stderr": 0}
        limit = req.max_output
        deadline = None if req.timeout is None else started + req.timeout
        timed_out = limited = False
        feeder = None
        try:  # from here on, any exit (Ctrl-C included) kills the command and releases it
            feeder = _feed_stdin(proc, req.stdin, stdin)
            kill_deadline = None
            last_probe = time.monotonic()
            while True:
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    raise ExecCancelled(f"cancelled: {req.argv[0]} was killed")
                if not timed_out and deadline is not None and now >= deadline:
                    timed_out = True
                    _kill_meanwhile(proc)  # keep draining while it dies: a full pipe must not stall the kill
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
                if limited:
                    continue  # killed for its output: drain what was in flight, keep none of it
                if limit is not None and sizes[stream] + len(data) > limit:
                    data = data[: limit - sizes[stream]]
                    limited = True
                    _kill_meanwhile(proc)  # keep draining while it dies: a full pipe must not stall the kill
                    kill_deadline = time.monotonic() + KILL_GRACE
                sizes[stream] += len(data)
                if data:
                    sink(stream, data)
            code = proc.wait(timeout=KILL_GRACE if timed_out or limited or proc.gone() else None)
            if code is None:
                proc.kill()
                code = proc.wait(timeout=KILL_GRACE)
        except BaseException:
            _kill_draining(proc)
            raise
        finally:
            if feeder is not None:
                feeder.join(timeout=0.1)
            proc.close()
        oom = False
        if timed_out:
            code = TIMEOUT_EXIT
        elif not limited and (code is None or code == OOM_EXIT or (code >= 128 and proc.gone())):
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
            output_limited=limited,
            start_failure=proc.start_failure,
            duration=time.monotonic() - started,
        )

    async def aexec(self, req: ExecRequest, *, stdin: BinaryIO | None = None,
                    on_output: OutputCallback | None = None) -> ExecResult:
        """exec for asyncio callers: the command runs in a worker thread, so the event loop is
        never blocked; cancelling the awaiting task kills the command's whole process tree, and
        the cancellation goes on only once it is dead. Raises what exec raises."""
        cancel = threading.Event()
        return await _in_thread(lambda: self.exec(req, stdin=stdin, on_output=on_output, cancel=cancel), cancel)

    async def aput_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """put_file in a worker thread (a cancellation waits for the bounded write to end). Raises
        what put_file raises."""
        await _in_thread(lambda: self.put_file(path, data, mode), None)

    async def aget_file(self, path: str, max_size: int | None = MAX_GET_FILE) -> bytes:
        """get_file in a worker thread (a cancellation waits for the bounded read to end). Raises
        what get_file raises."""
        return await _in_thread(lambda: self.get_file(path, max_size=max_size), None)

    def run(self, argv: list[str], **kw) -> ExecResult:
        """Shorthand: exec(ExecRequest(argv=argv, **kw)). Raises what exec raises."""
        return self.exec(ExecRequest(argv=argv, **kw))

    # Files: a default built on exec with POSIX sh, so it works in any image with a shell, over
    # any transport. Backends with direct access override it, with the same errors.
    def put_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write `data` to `path` in the sandbox, creating parent directories. An existing file
        is overwritten in place and keeps its mode unless `mode` is given; a new one gets `mode`
        or 0644. Raises IsADirectoryError, PermissionError, NotADirectoryError (a parent is a
        file) or OSError (not a regular file), each naming the path."""
        res = self.exec(ExecRequest(argv=["/bin/sh", "-c", PUT_FILE, "runner-put-file", path,
                                          "" if mode is None else f"{mode:o}"], stdin=data, max_output=65536))
        if res.exit_code != 0:
            raise _file_failure(res, path) or OSError(
                f"put_file {path}: {res.stderr.decode(errors='replace').strip() or f'exit {res.exit_code}'}")

    def get_file(self, path: str, max_size: int | None = MAX_GET_FILE) -> bytes:
        """Read the regular file at `path` in the sandbox. A file over `max_size` bytes (None: no
        bound) raises FileTooLarge, refused by its size before it is read; at most max_size+1
        bytes ever cross. Raises FileNotFoundError, IsADirectoryError, PermissionError or OSError
        (not a regular file), each naming the path."""
        lim = max_size if max_size is not None else 2**62
        res = self.exec(ExecRequest(argv=["/bin/sh", "-c", GET_FILE, "runner-get-file", path, str(lim)],
                                    max_output=max(lim + 1, 65536)))  # per stream: room for stderr
        if res.exit_code == 3:
            for line in res.stderr.splitlines():
                if line.startswith(FILE_ERROR + b"EFBIG"):
                    size = line.split()[-1]
                    raise FileTooLarge(path, lim, int(size) if size.isdigit() else None)
        if res.exit_code != 0 and not res.output_limited:
            raise _file_failure(res, path) or OSError(
                f"get_file {path}: {res.stderr.decode(errors='replace').strip() or f'exit {res.exit_code}'}")
        if len(res.stdout) > lim or res.output_limited:
            raise FileTooLarge(path, lim)
        return res.stdout


def _kill_meanwhile(proc: Process) -> None:
    """Kill in a thread while the caller goes on reading: a docker exec whose output nobody
    reads stalls the engine's stream, and with it the exec that would kill the command."""
    threading.Thread(target=proc.kill, name="runner-kill", daemon=True).start()


def _kill_draining(proc: Process) -> None:
    """Kill now, reading (and dropping) output meanwhile, for a caller that stops reading."""
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            item = proc.read(timeout=0.1)
            if item is not None and item[0] == "eof":
                return

    threading.Thread(target=drain, name="runner-drain", daemon=True).start()
    try:
        proc.kill()
    finally:
        stop.set()


_REASONS = typing.get_args(StartReason)


async def _in_thread(fn, cancel: threading.Event | None):
    """Run fn in a thread of its own (not a pool's: a long command must not hold up the others)
    without blocking the event loop. On cancellation: set `cancel` (fn then kills its command),
    wait until fn has returned, and only then re-raise. Waiting tolerates a cancellation
    delivered again at every await (anyio's cancel scopes do that)."""
    import asyncio

    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(ok: bool, value) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def run() -> None:
        try:
            ok, value = True, fn()
        except BaseException as e:  # handed to the awaiting task
            ok, value = False, e
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name="runner-async", daemon=True).start()
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if cancel is not None:
            cancel.set()
        while not fut.done():
            try:
                await asyncio.wait([fut])
            except asyncio.CancelledError:
                pass
        if not fut.cancelled():
            fut.exception()  # retrieved: ExecCancelled or a result nobody wants now
        raise


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
