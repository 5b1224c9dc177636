"""bash, exec and process: commands in their own process group, output streamed as it comes."""
from __future__ import annotations

import codecs
import collections
import os
import select
import signal
import subprocess
import threading
import time

from . import fsutil, oom, paths, zygote
from .context import Ctx, ToolError, dir_id

CHUNK = 64 * 1024
KILL_GRACE = 1.5
JOB_BUFFER = 1024 * 1024
DRAIN_WAIT = 1.0  # seconds an ended job's status waits for the rest of its output (what a child it left holds)
HOLD = 0.002  # seconds output waits for more (or for the end) before it is streamed on its own
HOLD_MAX = 0.05  # ... and at most this long while more keeps coming in small pieces
_jobs: "dict[int, Job]" = {}
_jobs_lock = threading.Lock()


def _shell() -> list:
    return [BASH or "/bin/sh", "-c"]


def _cwd(ctx: Ctx, cwd) -> str:
    if not cwd and ctx.workspace_id is not None and dir_id(ctx.workspace) == ctx.workspace_id:
        return ctx.workspace  # the very directory resolved at the hello: one stat, where a realpath took three
    real = paths.resolve(ctx, cwd or ".")
    if not os.path.isdir(real):
        raise ToolError(f"working directory not found: {cwd}")
    return real


def kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(proc: subprocess.Popen, timeout: float):
    """Exit status within timeout, else None. A pidfd wakes us the moment the process ends;
    Popen.wait(timeout) would poll with growing sleeps (about a millisecond lost per call). A
    forked shell's status is its zygote's line, waited for as such."""
    if isinstance(proc, zygote.Forked):
        return proc.wait(timeout)
    rc = proc.poll()
    if rc is not None:  # already ended (the usual case once its output has ended)
        return rc
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # old Python or kernel, or a sandbox kernel without pidfds
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return proc.wait() if ready else proc.poll()


def code_of(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def feed_stdin(proc: subprocess.Popen, data: bytes) -> None:
    """Write data to the process's stdin in a thread, then close it (a full pipe cannot block us)."""
    def feed() -> None:
        try:
            proc.stdin.write(data)
        except OSError:
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    threading.Thread(target=feed, daemon=True).start()


# A shell forked before the call that will use it (zygote.py: how, and why it is as clean as
# `bash -c COMMAND` started at the call), so a call pays neither the fork nor an exec on its critical
# path. Each serves one call only; the next is forked (by _Keeper) soon after that call's result.
SPARE_MAX = 60 * 1024  # bytes of a command that fit in an empty FIFO: its write never blocks


def needs_own_shell(command: str) -> bool:
    """A command that names `$$` gets a `bash -c` of its own: in a forked shell `$$` is the zygote's pid."""
    return "$$" in command or "${$" in command


class _Spare:
    def __init__(self, forked: zygote.Forked, cwd: str, env: dict) -> None:
        self.forked, self.cwd, self.env = forked, cwd, env

    def fits(self, ctx: Ctx, cwd: str, data: bytes) -> bool:
        """Forked for this call's env and directory (the very directory: not one that replaced
        it since), still there, its zygote too, and the command fits the FIFO."""
        if cwd != self.cwd or ctx.env is not self.env or len(data) > SPARE_MAX:
            return False
        if self.forked.gone():  # its zygote was seen alive as the spare was taken (_Keeper.take)
            return False
        return self.forked.zygote.cwd_id == dir_id(cwd)

    def take(self, data: bytes) -> "zygote.Forked | None":
        """The spare, running the command; None if its command FIFO would not take it."""
        return self.forked if self.forked.give(data) else None

    def discard(self) -> None:
        self.forked.discard()


BASH = fsutil.which("bash")
AHEAD_WITHIN = 0.01  # seconds from a result to the next call within which calls count as back to back
ZYGOTE_TRIES = 3  # zygotes that failed in a row (say, no writable temp dir) before calls start their own shells
_spare: "_Spare | None" = None


class _Keeper:
    """Has the next call's shell forked: asked for as a call's shell takes its command when calls
    come back to back (taken()), else once its result is written. The agent's own thread asks the running
    zygote (a few system calls) and goes on to read its next request;
    the spare's ready line is taken there when it comes (pending(), server.Wire.receive), or
    by the call that takes the spare if that comes first. Handing this to a thread cost ~50 us
    of CPU a call more (its wake-up and the lock's hand-over), on the sandbox's one CPU.
    Starting a zygote (a `bash -c`, ~1.5 ms) is left to a thread of its own, so the hello's
    answer and a call of another tool never wait for it; a call that comes before that thread
    has run asks the zygote itself if one runs (else it starts its own `bash -c`)."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.ctx: "Ctx | None" = None
        self.due = False  # a spare wanted from a zygote yet to be started (the thread's work)
        self.early = False  # calls will follow: a spare may be asked for before the last call's result
        self.wanted_at = 0.0  # when the last call's result was written
        self.thread: "threading.Thread | None" = None
        self.zygote: "zygote.Zygote | None" = None
        self.failures = 0

    def want(self, ctx: Ctx, early: bool) -> None:
        global _spare
        with self.cv:
            self.ctx, self.early, self.wanted_at = ctx, early, time.monotonic()
            if self._running():
                if _spare is not None and _spare.forked.lost():  # asked for ahead (taken()): the call
                    _spare = None  # removed its FIFOs, so it never comes; this replaces it
                self._order()
                self._settle()  # its ready line may have come with the last status already
                if _spare is not None:
                    return  # else the zygote failed (and was dropped): the thread starts another
            elif _spare is not None:  # asked for ahead (taken()) of a zygote that has ended since, say
                _spare.forked.close()  # killed by the call: the thread forks one from a new zygote
                _spare = None
            self.due = True
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="runner-agent-spare", daemon=True)
                self.thread.start()
            self.cv.notify()

    def taken(self) -> None:
        """A call's spare has taken its command. When calls come back to back (this one within
        AHEAD_WITHIN of the last result), the next is asked for now, while the spare wakes to run
        the command (the ask, two mkfifo and two opens, costs the call nothing then), and the
        zygote forks it as soon as it has reaped this one and told its status (the token waits in
        its input), while the agent ends the call and the controller reads the result. Asked for
        after the result, it was forked on the next call's path whenever the controller was
        quicker than the fork (most calls back to back); asked for as the output ended, the ask
        was on the call's path (~60 us). Its FIFOs are in the temp dir while the command runs:
        one that removes them costs that spare (Forked.lost, at want()), not the next call.
        After a pause it is asked for after the result, off the path, and the spare has time
        enough then."""
        global _spare
        with self.cv:
            if (not self.early or _spare is not None or time.monotonic() - self.wanted_at > AHEAD_WITHIN
                    or not self._ours()):
                return  # (a zygote that ended unseen fails the ask, at its pipe: no wait4 on the call's path)
            try:  # never replaces the zygote here: it is yet to tell this call's status
                _spare = _Spare(self.zygote.order(), self.ctx.workspace, self.ctx.env)
            except (OSError, zygote.ZygoteError):
                pass  # asked for again after the result, where a zygote that failed is replaced

    def _ours(self) -> bool:
        """There is a zygote, not closed, for the current ctx's workspace and env."""
        z = self.zygote
        return z is not None and not z.closed and z.cwd == self.ctx.workspace and z.env is self.ctx.env

    def _running(self) -> bool:
        """_ours, and its process has not ended (a wait4)."""
        return self._ours() and self.zygote.alive()

    def pending(self):
        """(the zygote's pipe, what to do when it can be read) while the spare asked for has not
        said it runs; else None."""
        spare = _spare
        if spare is None or spare.forked.pid is not None or spare.forked.zygote.closed:
            return None
        return spare.forked.zygote.out, self.settle

    def settle(self) -> None:
        """Take the spare's ready line if it has come (never waits for it)."""
        with self.cv:
            self._settle()

    def _settle(self) -> None:
        if _spare is not None:
            try:
                _spare.forked.ready(0)
            except (OSError, ValueError, zygote.ZygoteError):
                self._failed(_spare.forked.zygote)

    def take(self) -> "_Spare | None":
        """The spare if there is one, once it runs (waiting while the zygote forks it or the
        thread starts the zygote); None if there is none or it failed."""
        global _spare
        with self.cv:
            if self.due:
                self.due = False
                if self.zygote is not None and self.zygote.alive():
                    self._order()
            spare, _spare = _spare, None
            if spare is None:
                return None
            if not spare.forked.zygote.alive():  # closed meanwhile (say, stopped and replaced)
                spare.forked.close()
                return None
            try:
                spare.forked.ready()
            except zygote.SpareLost:  # (its FIFOs were gone): this call starts its own shell, the
                return None           # zygote is well and is asked again after the result
            except zygote.ZygoteError:  # say, at the pids limit: the call starts its own shell
                self._failed(spare.forked.zygote)
                return None
            self.failures = 0
            return spare

    def retire(self) -> None:
        """No more spares: the zygote ends (a per-call sandbox's one call has its shell)."""
        global _spare
        with self.cv:
            self.due = False
            if _spare is not None:
                _spare.forked.close()
                _spare = None
            self._drop_zygote()

    def _run(self) -> None:
        global _spare
        with self.cv:
            while True:
                if not self.due:
                    self.cv.wait()
                    continue
                self.due = False
                self._order()
                if _spare is not None:  # its ready line is taken here: the agent's loop may be
                    try:                # reading its input already, and its FIFOs be left in place
                        _spare.forked.ready()
                        self.failures = 0
                    except zygote.SpareLost:
                        _spare = None  # (closed): asked for again after the next result
                    except zygote.ZygoteError:
                        self._failed(_spare.forked.zygote)

    def _order(self) -> None:
        """Under self.cv: ask the zygote for a spare (starting the zygote if there is none)."""
        global _spare
        if _spare is None and self.failures < ZYGOTE_TRIES:
            try:
                _spare = _Spare(self._zygote_for().order(), self.ctx.workspace, self.ctx.env)
            except (OSError, subprocess.SubprocessError, zygote.ZygoteError):
                self._failed(self.zygote)

    def _failed(self, z: "zygote.Zygote | None") -> None:
        """Under self.cv: the spare (if any) and the zygote z are given up (not another that
        replaced it); after ZYGOTE_TRIES in a row calls start their own shells."""
        global _spare
        if _spare is not None:
            _spare.forked.close()
            _spare = None
        self.failures += 1
        if z is not None and z is self.zygote:
            self._drop_zygote()

    def _zygote_for(self) -> zygote.Zygote:
        """The running zygote for the current ctx, started (and one for another replaced) if need be."""
        if not self._running():
            self._drop_zygote()
            with fsutil.UMASK_LOCK:  # never while a write reads the umask
                self.zygote = zygote.Zygote(BASH, self.ctx.workspace, self.ctx.env)
        return self.zygote

    def _drop_zygote(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None


_keeper = _Keeper()


def prepare(ctx: Ctx, early: bool = True) -> None:
    """Have a spare shell ready for the next call (between calls, off their critical path);
    early: calls will follow, so each call that takes a spare asks for the next one at once."""
    if BASH is not None and ctx is not None:
        _keeper.want(ctx, early)


def pending():
    """(fd, handler) while the spare asked for has not said it runs: the agent's loop waits on
    the fd beside its input and calls the handler when it can be read."""
    return _keeper.pending()


def retire() -> None:
    """No spare shells from now on (a per-call sandbox after its call)."""
    _keeper.retire()


def _start(ctx: Ctx, command: str, cwd: str, stdin_text: str | None) -> subprocess.Popen:
    if "\0" in command:
        raise ToolError("the command holds a NUL character, which no shell command can hold")
    try:
        data = os.fsencode(command)  # as Popen would encode it
    except UnicodeError:
        raise ToolError("the command is not valid text (a lone surrogate)") from None
    spare = _keeper.take()
    if spare is not None:
        if stdin_text is None and not needs_own_shell(command) and spare.fits(ctx, cwd, data):
            proc = spare.take(data)
            if proc is not None:
                return proc
        spare.discard()
    proc = subprocess.Popen(_shell() + [command], cwd=cwd, env=ctx.env, start_new_session=True,
                            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if stdin_text is not None:
        feed_stdin(proc, stdin_text.encode("utf-8"))
    return proc


def run_streamed(ctx: Ctx, call_id: str, command: str, cwd: str, timeout: float, stdin_text: str | None = None):
    """Run `command`; send its output as `output` events; return (exit code, timed out)."""
    proc = _start(ctx, command, cwd, stdin_text)
    if isinstance(proc, zygote.Forked):
        _keeper.taken()  # while the spare wakes to run the command: the zygote forks the next when it ends
    fd = proc.stdout.fileno()
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    sel = select.poll()  # no descriptor of its own to make and close per call, as an epoll selector has
    # For HOLD, only the output's end wakes the agent (POLLHUP: no writer is left): a command that
    # ends by then, most of them, costs one wake-up, not one for its output and one for its end.
    sel.register(fd, 0)
    deadline = time.monotonic() + timeout
    quiet_until = time.monotonic() + HOLD
    timed_out = False
    exited_at = None
    pending = ""  # output read but not sent yet: the last of it goes out with the result
    held_since = 0.0
    hold = getattr(ctx, "hold", None) or ctx.send
    try:
        while True:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                kill_group(proc.pid, signal.SIGTERM)
                deadline = now + KILL_GRACE
            elif timed_out and now >= deadline:
                kill_group(proc.pid, signal.SIGKILL)
                break
            wait = min(0.1, max(0.0, deadline - now))
            if quiet_until:
                if now < quiet_until:
                    ready = sel.poll(min(wait, quiet_until - now) * 1000)
                    if not ready:
                        continue
                quiet_until = 0.0
                sel.modify(fd, select.POLLIN)
            ready = sel.poll((min(wait, HOLD) if pending else wait) * 1000)
            if not ready:
                if pending:  # nothing more came at once: stream what we have
                    ctx.send({"op": "output", "id": call_id, "data": pending})
                    pending = ""
                # asked only while the output is idle (a shell's end is asked for again and again
                # otherwise, each time it writes): that is when background holders matter
                if exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                if exited_at is not None and time.monotonic() - exited_at > 0.2:
                    break  # the shell ended and the pipe is idle: children left in the background hold it
                continue
            data = os.read(fd, CHUNK)
            if not data:
                break
            if not pending:
                held_since = time.monotonic()
            pending += dec.decode(data)
            if len(pending) >= CHUNK or time.monotonic() - held_since >= HOLD_MAX:
                ctx.send({"op": "output", "id": call_id, "data": pending})
                pending = ""
        pending += dec.decode(b"", final=True)
        if pending:  # one write with the result: one trip through the engine, not two
            hold({"op": "output", "id": call_id, "data": pending})
    finally:
        if timed_out:
            kill_group(proc.pid, signal.SIGKILL)
        rc = _wait(proc, KILL_GRACE)
        if rc is None:
            kill_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        if timed_out:
            group_gone(proc.pid, KILL_GRACE)
        proc.stdout.close()
    return (124 if timed_out else code_of(rc)), timed_out


def group_gone(pgid: int, within: float) -> None:
    """Wait until no process of the killed group is left, zombies included (each holds a slot
    under the sandbox's pids limit until its new parent reaps it), so the next call can fork."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.01)


def shell_answer(code: int, timed_out: bool, timeout: float, oom_killed: bool = False):
    meta = {"streamed": True, "exit_code": code, "timed_out": timed_out}
    if oom_killed:
        meta["oom_killed"] = True
        return {"content": f"exit code: {code}: out of memory: the sandbox's memory limit killed a process of this "
                           "command (use less memory, or raise limits.memory)", "is_error": True, "meta": meta}
    if timed_out:
        return {"content": f"timed out after {timeout:g}s: the command and all its processes were killed (exit code 124)",
                "is_error": True, "meta": meta}
    if code != 0:
        return {"content": f"exit code: {code}", "is_error": True, "meta": meta}
    return {"content": "", "is_error": False, "meta": meta}


STDERR_KEEP = 1024 * 1024  # characters of a separate stderr the agent keeps (its head and tail halves)


class Kept:
    """A stream kept apart in memory: its first and last `limit // 2` characters, and how many
    were dropped between them (the controller cuts it to the policy's caps anyway)."""

    def __init__(self, limit: int = STDERR_KEEP) -> None:
        self.half = limit // 2
        self.head = ""
        self.tail: collections.deque = collections.deque()
        self.tail_size = 0
        self.dropped = 0

    def add(self, text: str) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += text[:room]
            text = text[room:]
        if not text:
            return
        self.tail.append(text)
        self.tail_size += len(text)
        while self.tail_size > self.half:
            over = self.tail_size - self.half
            first = self.tail[0]
            if len(first) <= over:
                self.tail.popleft()
                self.tail_size -= len(first)
                self.dropped += len(first)
            else:
                self.tail[0] = first[over:]
                self.tail_size -= over
                self.dropped += over

    def text(self) -> str:
        mid = f"\n[... {self.dropped} characters of stderr dropped in the sandbox ...]\n" if self.dropped else ""
        return self.head + mid + "".join(self.tail)


def run_split(ctx: Ctx, call_id: str, command: str, cwd: str, timeout: float):
    """Run `command` with its stderr apart: stdout is sent as `output` events (the controller
    keeps and cuts it as any output), stderr kept here (Kept) for the result. A shell of its own
    (`bash -c`), not a spare: a spare's two streams are one FIFO. Returns (exit code, timed out,
    stderr, stderr characters dropped)."""
    if "\0" in command:
        raise ToolError("the command holds a NUL character, which no shell command can hold")
    try:
        os.fsencode(command)
    except UnicodeError:
        raise ToolError("the command is not valid text (a lone surrogate)") from None
    proc = subprocess.Popen(_shell() + [command], cwd=cwd, env=ctx.env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in (out_fd, err_fd)}
    err = Kept()
    sel = select.poll()
    for fd in decoders:
        sel.register(fd, select.POLLIN)
    open_fds = set(decoders)
    deadline = time.monotonic() + timeout
    timed_out = False
    exited_at = None

    def take(fd: int, text: str) -> None:
        if not text:
            return
        if fd == out_fd:
            ctx.send({"op": "output", "id": call_id, "data": text})
        else:
            err.add(text)

    try:
        while open_fds:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                kill_group(proc.pid, signal.SIGTERM)
                deadline = now + KILL_GRACE
            elif timed_out and now >= deadline:
                kill_group(proc.pid, signal.SIGKILL)
                break
            ready = sel.poll(min(0.1, max(0.0, deadline - now)) * 1000)
            if not ready:
                if exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                if exited_at is not None and time.monotonic() - exited_at > 0.2:
                    break  # the shell ended and its pipes are idle: children left in the background hold them
                continue
            for fd, _ in ready:
                data = os.read(fd, CHUNK)
                if not data:
                    sel.unregister(fd)
                    open_fds.discard(fd)
                take(fd, decoders[fd].decode(data, final=not data))
        for fd in decoders:
            take(fd, decoders[fd].decode(b"", final=True))
    finally:
        if timed_out:
            kill_group(proc.pid, signal.SIGKILL)
        rc = _wait(proc, KILL_GRACE)
        if rc is None:
            kill_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        if timed_out:
            group_gone(proc.pid, KILL_GRACE)
        proc.stdout.close()
        proc.stderr.close()
    return (124 if timed_out else code_of(rc)), timed_out, err.text(), err.dropped


def bash(ctx: Ctx, args: dict, call_id: str = ""):
    command = args["command"]
    if not isinstance(command, str) or not command.strip():
        raise ToolError("command is empty")
    timeout = float(args.get("timeout") or 120)
    ooms = oom.kills()
    cwd = _cwd(ctx, args.get("cwd"))
    if args.get("separate_stderr"):
        code, timed_out, err, dropped = run_split(ctx, call_id, command, cwd, timeout)
        answer = shell_answer(code, timed_out, timeout, oom.killed_since(ooms))
        answer["meta"]["stderr"] = err
        if dropped:
            answer["meta"]["stderr_dropped_chars"] = dropped
        return answer
    code, timed_out = run_streamed(ctx, call_id, command, cwd, timeout)
    return shell_answer(code, timed_out, timeout, oom.killed_since(ooms))


class Job:
    def __init__(self, proc: subprocess.Popen, command: str) -> None:
        self.proc, self.command = proc, command
        self.started = time.time()
        self.buf: collections.deque = collections.deque()
        self.size = 0
        self.dropped = 0
        self.unread = 0
        self.lock = threading.Lock()
        self.eof = threading.Event()  # the reader has read the output to its end
        self.drained = False  # state() has waited for that since the job ended
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), CHUNK)
            except OSError:
                data = b""
            text = dec.decode(data, final=not data)
            with self.lock:
                if text:
                    self.buf.append(text)
                    self.size += len(text)
                    self.unread += len(text)
                    while self.size > JOB_BUFFER and len(self.buf) > 1:
                        old = self.buf.popleft()
                        self.size -= len(old)
                        self.dropped += len(old)
            if not data:
                self.eof.set()
                return

    def state(self) -> dict:
        """A job is told ended once its output is read to the end too, so a poll after it has
        it all: the bytes it wrote before it exited may still be in the pipe, its reader not yet
        run. A process it left behind holding the pipe is waited for once, no longer than DRAIN_WAIT."""
        rc = self.proc.poll()
        if rc is not None and not self.drained:
            self.eof.wait(DRAIN_WAIT)
            self.drained = True
        return {"pid": self.proc.pid, "command": self.command[:200], "running": rc is None,
                "exit_code": None if rc is None else code_of(rc), "runtime_s": round(time.time() - self.started, 1)}

    def newest(self, limit: int = 30_000) -> str:
        with self.lock:
            text = "".join(self.buf)
            self.unread = 0
        if len(text) > limit:
            text = f"[... {len(text) - limit + self.dropped} earlier characters not shown]\n" + text[-limit:]
        elif self.dropped:
            text = f"[... {self.dropped} earlier characters dropped from the buffer]\n" + text
        return text


def exec_(ctx: Ctx, args: dict, call_id: str = ""):
    command = args["command"]
    if not isinstance(command, str) or not command.strip():
        raise ToolError("command is empty")
    cwd = _cwd(ctx, args.get("working_dir"))
    timeout = float(args.get("timeout") or 120)
    if args.get("background"):
        proc = subprocess.Popen(_shell() + [command], cwd=cwd, env=ctx.env, start_new_session=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if args.get("input"):
            try:
                proc.stdin.write(args["input"].encode("utf-8"))
                proc.stdin.flush()
            except OSError:
                pass
        with _jobs_lock:
            _jobs[proc.pid] = Job(proc, command)
        return {"content": f"started in the background: pid {proc.pid}. Use the process tool with this pid to "
                           "poll its output, send input or signals, or kill it.", "meta": {"pid": proc.pid}}
    ooms = oom.kills()
    code, timed_out = run_streamed(ctx, call_id, command, cwd, timeout, stdin_text=args.get("input"))
    return shell_answer(code, timed_out, timeout, oom.killed_since(ooms))


SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT, "HUP": signal.SIGHUP,
           "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT, "USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2,
           "QUIT": signal.SIGQUIT}


def process(ctx: Ctx, args: dict):
    action = args["action"]
    with _jobs_lock:
        jobs = dict(_jobs)
    if action == "list":
        if not jobs:
            return "no background jobs"
        rows = [j.state() for j in jobs.values()]
        return "\n".join(f"{r['pid']}  {'running' if r['running'] else 'exited ' + str(r['exit_code'])}  "
                         f"{r['runtime_s']}s  {r['command']}" for r in rows)
    pid = args.get("pid")
    if pid is None:
        raise ToolError(f"process {action} needs a pid: use action list to see the jobs")
    job = jobs.get(int(pid))
    if job is None:
        raise ToolError(f"no background job with pid {pid}: use action list to see the jobs")
    st = job.state()
    status = "running" if st["running"] else f"exited with code {st['exit_code']}"
    if action == "status":
        return {"content": f"pid {pid}: {status}, {st['runtime_s']}s, command: {st['command']}", "meta": st}
    if action == "poll":
        out = job.newest()
        return {"content": f"pid {pid}: {status}\n{out if out else '(no output yet)'}", "meta": st}
    if action == "input":
        data = args.get("data")
        if not isinstance(data, str):
            raise ToolError("process input needs data (a string)")
        try:
            job.proc.stdin.write(data.encode("utf-8"))
            job.proc.stdin.flush()
        except (OSError, ValueError):
            raise ToolError(f"pid {pid} no longer reads its input ({status})") from None
        return f"sent {len(data)} characters to pid {pid}"
    if action in ("signal", "kill"):
        name = "KILL" if action == "kill" else str(args.get("signal") or "TERM").upper().replace("SIG", "")
        sig = SIGNALS.get(name) if not name.isdigit() else int(name)
        if sig is None:
            raise ToolError(f"unknown signal {name}: use one of {', '.join(SIGNALS)}")
        kill_group(job.proc.pid, sig)
        if action == "kill":
            try:
                job.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return f"sent SIG{name if not name.isdigit() else name} to pid {pid}'s process group"
    raise ToolError(f"unknown action {action}: use list, status, poll, input, signal or kill")


def shutdown() -> None:
    spare = _keeper.take()
    if spare is not None:
        spare.discard()
    _keeper.retire()
    with _jobs_lock:
        for job in _jobs.values():
            kill_group(job.proc.pid, signal.SIGKILL)
        _jobs.clear()
