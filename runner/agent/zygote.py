"""The shell each bash call runs in, forked ahead of the call from a clean bash (the zygote).

Why: starting a program is what a call costs the sandbox. In a container here `bash -c` from the
agent takes ~1.4 ms of CPU (exec, the loader, bash's start-up) and a fork of a bash that has
already started ~0.4 ms; back to back, a sandbox's one CPU is the limit, so that is the call rate.

How it stays clean: the zygote is started by the agent (the env, cwd, umask, rlimits and signals
no call changes) and never runs anything a call sent; it only forks. Each fork ("a spare") sets up
its own stdio, drops what the zygote holds, and waits for its one command, which it evals. So a
call's shell is a new process, in a process group of its own, with stdin /dev/null, descriptors
0-2 only, no variables, traps, functions or options that `bash -c` would not have. What a forked
subshell cannot change: `$$` names the zygote, not the call's shell (`$BASHPID` does), and
`$BASH_SUBSHELL` is 1. A command that names `$$` therefore gets its own `bash -c`
(procs.needs_own_shell), so `$$` is that call's pid wherever the command itself uses it.

The zygote's protocol (its stdin and stdout, pipes to the agent): the agent writes a random token
T per spare; the spare opens PREFIX T.in (its command) and PREFIX T.out (its stdout and stderr),
both FIFOs the agent made and opened first (PREFIX: the temp dir, FIFO_PREFIX, the agent's pid
and start time), then writes `r PID T`; the zygote waits for it as a foreground job and writes
`x STATUS T` when it has ended (or at once, for a token that names no FIFO). When the next
spare's token already waits in its input (calls back to back), that line goes out with the
next spare's ready line, in one write: one wake-up of the agent a call, not two. A spare whose command returned with no EXIT trap set writes
`s STATUS PID` itself, then closes its output (TAIL): the agent takes that status once the output
has ended, without waiting for the exit. One spare at a time, so a status is that spare's; the token of the next may
wait in the zygote's input while a spare runs (Zygote.order), and the zygote forks that one as
soon as it has told the status. Zygote.ready takes the next spare's `r` line: from the agent's
loop while it waits for a request, or when a call takes the spare. A spare to lend the controller
(order(lend=True), agent/lender.py) has a third FIFO, PREFIX T.st, which the zygote holds open
read-write as its fd 8 while that spare runs; given `l` before its command, the spare tells its
own status there (LENT_TAIL), where the controller holds the read end (runner/controller/lent_shells.py).
The FIFOs (0600) are removed once the spare holds them (or, if the agent was killed first, by
the next zygote's sweep). Everything in the sandbox is one user, so a
process there can write into these pipes: a line that does not parse is dropped, `r` is believed
only from a child of the zygote, `x` only once the spare has ended and `s` only once no writer
is left on the call's output (so such a line ends no call early), and at worst a sandbox
confuses its own exit codes, which the controller never trusted. Such a process can also ptrace
the zygote (it is a bash of the sandbox's user), as it can any later call's shell: calls of one
session are not kept from each other by the sandbox, only sessions and the host (SECURITY.md).
"""
from __future__ import annotations

import os
import select
import shlex
import signal
import stat
import subprocess
import threading
import time

from . import fsutil

TRAPPED = "TERM INT HUP QUIT USR1 USR2"
# What the spare does once its command has returned (not after `exit`, `exec` or a signal, nor
# for a command that names `trap`: then only the zygote tells the status; Forked.give). With no
# EXIT trap set (`trap -p EXIT` into the zygote's scratch file, its fd 9, leaves it empty), it
# tells its own status on the zygote's pipe, `s STATUS PID`, and closes its stdout and stderr: the call's output ends there, and the agent has the
# status without waiting for the spare's exit (the kernel tears its memory down before it closes
# its descriptors) and the zygote's wake-up. With an EXIT trap the trap's output must still reach
# the call, so nothing is closed. All of it but the `exit` is one test whose stderr is closed: no
# xtrace line (`set -x`) of ours reaches the call's output (but `+ exit N` when a trap follows,
# which is then traced as it would have been), no ERR trap or errexit fires on a failed check,
# and the trap's $? is the command's status. `>|`: noclobber refuses `>` on a file. A failed check
# (no /proc, a descriptor limit) costs only the speed. The zygote runs `trap -p` once at its start:
# a shell's first one queries all 64 signals (~130 sigaction calls, which every spare repeated).
TAIL = ('if {{ __runner_s=$?; trap -p EXIT >|/proc/$$/fd/9 && [[ ! -s /proc/$$/fd/9 ]] && '
        'printf "s %s %s\\n" "$__runner_s" "$BASHPID" >|/proc/$$/fd/1 && set +x; }} 2>&-; then exec >&- 2>&-; fi; '
        'exit "$__runner_s"')
# The same for a spare lent to the controller (`l`, agent/lender.py): its status goes on the
# zygote's fd 8, the FIFO the controller holds the read end of (PREFIX T.st), not to the agent.
LENT_TAIL = TAIL.replace('"s %s %s\\n" "$__runner_s" "$BASHPID" >|/proc/$$/fd/1',
                         '"s %s %s\\n" "$__runner_s" "$BASHPID" >|/proc/$$/fd/8')
assert LENT_TAIL != TAIL
# The call's command (after the byte Forked.give puts before it), with the spare's variables gone
# and BASH_EXECUTION_STRING the command's, as `bash -c` has it (it held the zygote's script: this
# agent's FIFO prefix).
RUN = ('eval "BASH_EXECUTION_STRING=\\${{__runner_cmd:1}}; unset __runner_cmd __runner_d __runner_x __runner_e; '
       'SECONDS=0;${{__runner_cmd:1}}"')
# One line (a command's $LINENO counts from the eval). The zygote traps signals with a handler, not
# ignores them: `kill` of it by a call does nothing, and a fork gets the defaults back (an ignored
# signal would stay ignored in every call). Job control (set -m) gives each spare its own process
# group; the spare turns it off again, as `bash -c` has it. The spare is a foreground subshell, not
# `&`: that would leave its pid in the next spare's `$!`. A spare that stops makes the zygote say
# `x 128+N` while it still runs: the agent takes an `x` as a status only for a spare that has ended.
# A token that names no FIFO makes no spare, only the zygote's `x 127 T`: that, like the `x` of a
# spare that ended before its ready line, tells the agent the spare will never run (SpareLost). The
# spare's redirections (on the subshell: made in the fork, with none of the saving and restoring an
# `exec` of them costs) open each FIFO read-write first, then its own end onto the same descriptor:
# the open of one end waits for the other, and the agent that held the others may have been killed
# since it asked (the zygote dies with it, and the spare waited in open(2) for good). `<>` makes a
# file where the name is gone: a spare that finds either of its ends no FIFO (a process of the
# sandbox removed it) ends without its ready line, and the agent removes the names; an empty file a
# spare made after the agent had given it up is removed by _sweep. A spare's `x` waits for the next
# spare's `r` while that one's token waits (`read -t 0`, which reads nothing), in one write with it
# (`printf '\n'` at the start: the first write of bash's stdout split a line holding two; an empty
# line is nothing to the agent), and is written on its own again if that spare ends by status 1 or
# 126 and more (a failed redirection of the subshell, unready, killed first: a second copy of a
# line is dropped), at a skipped token, or at the input's end. Left, both a call's own exit code
# lost, 137: a zygote that cannot fork (at the pids limit bash retries ~15 s, then exits) loses a
# status it held, and bytes a process of the sandbox writes into the zygote's input, fewer than a
# token, hold the status of a call that ended by `exit`, `exec`, a trap or a signal until the next
# token, which after a pause comes only after that call's result (a read with a timeout, which
# would tell it, costs bash a sigprocmask pair per byte, ~30 us a call). A spare's `r` and the
# zygote's `x` name the spare's token: bytes written into the zygote's input by a process of the
# sandbox (a flood of them is read 16 at a time) give no status the agent takes for its spare's,
# and a line of the status pipe lost in such a flood costs only that status.
SCRIPT = ("{move}trap -p EXIT >/dev/null; set -m; trap : " + TRAPPED + "; printf '\\n'; "
          "while IFS= read -r -N {n} __runner_d; do [[ -p {prefix}\"$__runner_d.in\" ]] || {{ __runner_x+=\"x 127 $__runner_d\"$'\\n'; printf %s \"$__runner_x\"; "
          "__runner_x=; continue; }}; [[ -p {prefix}\"$__runner_d.st\" ]] && exec 8<>{prefix}\"$__runner_d.st\"; "
          "( trap - " + TRAPPED + "; set +m; [[ -p /dev/fd/3 && -p /dev/fd/4 ]] || exit 126; "
          '__runner_x+="r $BASHPID $__runner_d"$\'\\n\'; printf %s "$__runner_x"; exec </dev/null >&4 2>&4 4>&- 8>&- 9>&-; '
          'IFS= read -r -d "" -N 1073741823 -u 3 __runner_cmd; exec 3<&-; if [[ $__runner_cmd == t* ]]; then '
          + RUN + '; ' + TAIL + '; elif [[ $__runner_cmd == l* ]]; then ' + RUN + '; ' + LENT_TAIL + '; else ' + RUN
          + '; fi ) 3<>{prefix}"$__runner_d.in" 3<{prefix}"$__runner_d.in" 4<>{prefix}"$__runner_d.out" 4>{prefix}"$__runner_d.out"; '
          # the held line again unless the spare surely wrote it: 1 is also a failed redirection of the subshell
          '__runner_e=$?; (( __runner_e == 0 || (__runner_e > 1 && __runner_e < 126) )) || printf %s "$__runner_x"; '
          '__runner_x="x $__runner_e $__runner_d"$\'\\n\'; '
          'read -t 0 || {{ printf %s "$__runner_x"; __runner_x=; }}; exec 8>&-; done; printf %s "$__runner_x"')
# The agent writes each spare's token, TOKEN hex digits and no newline: `read -N` takes it in one
# read(2), where a line is read a byte at a time from a pipe (41 reads a call for a whole path).
TOKEN = 16
DRAIN_MAX = 1 << 20  # bytes of the zygote's pipe read past a wait's deadline while more is there (a
# flood is drained as it comes, as the sandbox's pipes are, without holding the agent for good)
LINE_MAX = 64  # bytes of the zygote's longest line (`r PID TOKEN`, `x STATUS TOKEN`) and then some
READY_WITHIN = 2.0  # seconds a spare may take to report ready before the zygote is given up
STATUS_WITHIN = 1.0  # seconds the zygote may take to tell a status once the spare has ended
FIFO_PREFIX = "runner-agent-"  # then the agent's pid, a dot, its start time, a dash and a random part; .in and .out


class ZygoteError(Exception):
    """The zygote is gone or does not answer: start the call's shell directly."""


class SpareLost(ZygoteError):
    """The zygote said the spare asked for will never run (its FIFOs were gone, or it ended
    before its ready line): ask for another; the zygote itself is well."""


def _dies_with_its_parent():
    """For the zygote's fork, before it runs bash: SIGKILL when the thread that made it (the
    agent's keeper) ends. An agent killed without its shutdown would leave the zygote behind,
    for good if it was stopped (its own session, so nothing else ends it). None without ctypes."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _sweep(tmp: str, mine: str = "") -> None:
    """Remove the FIFOs of agents that have ended (a name with the pid of no process, or with a
    start time that is not the live process's by that pid: the kernel gave it to another): one
    killed while a spare was forked had no time to. Also empty plain files of such a name, and of
    mine (this agent's prefix, as a zygote of it closes): a spare given up as it opened its FIFOs
    made them (`<>` creates the name it finds gone; ours are only ever FIFOs). Never followed; a
    name of another user's stays (the temp dir is sticky), and so does one whose process cannot be
    told gone (a pid of another user's, a name without a start time whose pid lives)."""
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(FIFO_PREFIX):
            continue
        pid, dot, start = entry.name[len(FIFO_PREFIX):].partition("-")[0].partition(".")
        if not pid.isdigit() or (dot and not start.isdigit()):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        made = stat.S_ISREG(st.st_mode) and st.st_size == 0
        if not (made or stat.S_ISFIFO(st.st_mode)):
            continue
        if ((made and mine and entry.name.startswith(mine)) or _gone(int(pid))
                or (dot and _start(int(pid)) not in (None, start.encode()))):
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _unlink(paths) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _reaped(pid: int) -> bool:
    """No process has the pid any more (one kill(2))."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def _gone(pid: int) -> bool:
    """No process has the pid, or it has exited (a zombie: a killed agent its parent has not yet
    reaped). A pid that cannot be told (someone else's, or no /proc) counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return _state(pid) in (b"Z", b"X")


def _stat_fields(pid: int) -> "list[bytes] | None":
    """The fields of /proc/PID/stat after the command's name (state, ppid, …), None if it cannot
    be read. Three system calls: a buffered open() took nine (fstat twice, an ioctl, two lseeks)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)  # a few hundred bytes, read whole by procfs in one call
    except OSError:
        return None
    finally:
        os.close(fd)
    head, paren, rest = data.rpartition(b")")
    return rest.split() or None if paren else None


def _start(pid: int) -> "bytes | None":
    """When the process started (clock ticks since boot, field 22 of /proc/PID/stat), None if it
    cannot be read: with the pid, which process it is, where a pid alone may have been reused."""
    fields = _stat_fields(pid)
    return None if fields is None or len(fields) < 20 else fields[19]


def _state(pid: int) -> "bytes | None":
    """The process's state letter as /proc tells it (Z: a zombie), None if it cannot be read."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[0]


def _ended(pid: int) -> bool:
    """The process has exited (a zombie, or gone), as the kernel tells: not a line anyone wrote.
    Gone is the usual case (the zygote tells a status once it has reaped the spare): one kill(2)
    tells it, where reading /proc took an open, a read and a close."""
    return _reaped(pid) or _state(pid) in (None, b"Z", b"X")


class Zygote:
    """One clean bash that forks spares, one at a time: it waits for each (a foreground job)."""

    def __init__(self, bash: str, cwd: str, env: dict) -> None:
        self.cwd, self.env = cwd, env
        st = os.stat(cwd)
        self.cwd_id = st.st_dev, st.st_ino  # the directory its forks start in
        self.lock = threading.Lock()
        self.buf = b""
        self.current: "int | None" = None  # the spare forked and not ended
        self.current_token = b""  # its token, which its status line names
        self.forking: "bytes | None" = None  # the token of the spare being forked
        self.unready = b""  # a token whose spare the zygote said will never run (Forked.lost)
        self.left: "int | None" = None  # a spare that stopped: the zygote went on without it
        self.ended: dict[int, int] = {}  # statuses the zygote told, of spares that have ended
        self.told: dict[int, int] = {}  # statuses spares told of themselves (TAIL), not yet ended
        self.taken_told: "int | None" = None  # the spare whose own word was taken: its `x` is not kept
        self.closed = False
        tmp = fsutil.tempdir()
        # the FIFOs' names: this prefix, then a spare's token. The name holds the agent's pid and
        # start time: an agent killed while a spare was forked (say, from a stopped zygote) leaves
        # its two, and the next zygote's _sweep removes them, even once its pid is another's.
        me, start = os.getpid(), _start(os.getpid())
        self.prefix = os.path.join(tmp, f"{FIFO_PREFIX}{me}{'.' + start.decode() if start else ''}-")
        _sweep(tmp, mine=os.path.basename(self.prefix))
        # the spares' scratch file (TAIL), no name: each opens it again as /proc/ZYGOTE/fd/N
        t = fsutil.unnamed_file(tmp)  # moved to fd 9 (TAIL's, and clear of the spare's 3 and 4)
        try:
            script = SCRIPT.format(n=TOKEN, prefix=shlex.quote(self.prefix), move="" if t == 9 else f"exec 9<&{t} {t}<&-; ")
            self.proc = subprocess.Popen([bash, "-c", script], cwd=cwd, env=env, start_new_session=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         pass_fds=(t,), preexec_fn=_dies_with_its_parent())
        finally:
            os.close(t)
        self.inp = self.proc.stdin.fileno()
        os.set_blocking(self.inp, False)  # a stopped zygote with a full pipe must not hold the agent
        self.out = self.proc.stdout.fileno()

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def order(self, lend: bool = False) -> "Forked":
        """Ask for a new spare and return at once: the zygote forks it while the agent goes on
        (to read its next request, where the spare's ready line is taken when it comes).
        Forked.ready() waits for it. ZygoteError if the ask fails. lend: a spare for the
        controller (agent/lender.py), with a third FIFO, PREFIX T.st, on which the zygote
        holds the write end while it runs (its fd 8: where LENT_TAIL tells the status)."""
        with self.lock:
            if self.forking is not None:  # the spare in use may run: the zygote forks this one when it ends
                raise ZygoteError("the zygote has a spare asked for already")
            fds, made = [], []
            # FIFOs of a random name in the temp dir (mkfifo fails on any name that exists, a link
            # too; the dir is sticky), gone once the spare holds them. 0600: no other user may open them.
            token = os.urandom(TOKEN // 2).hex().encode()
            base = self.prefix + token.decode()
            try:
                for suffix in (".in", ".out", ".st") if lend else (".in", ".out"):
                    os.mkfifo(base + suffix, 0o600)
                    made.append(base + suffix)
                # O_RDWR: the spare's open of P.in never waits for a writer; O_NONBLOCK: no write or
                # read of ours waits for a spare that stopped (or a process that filled the FIFO)
                fds.append(os.open(base + ".in", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW))
                fds.append(os.open(base + ".out", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW))
                if lend:  # read before the zygote opens it to write: its open never waits
                    fds.append(os.open(base + ".st", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW))
                self.forking = token
                if os.write(self.inp, token) != len(token):
                    raise ZygoteError("the zygote's input is full")
            except (OSError, ValueError, ZygoteError) as e:
                self.forking = None
                for fd in fds:
                    os.close(fd)
                _unlink(made)
                raise ZygoteError(f"no spare from the zygote: {e}") from None
            return Forked(self, token, made, *fds)

    def ready(self, token: bytes, fifos: list, timeout: float) -> "int | None":
        """The pid of the spare being forked once it has said it runs (it holds its FIFOs then,
        and they are removed). With timeout 0, None if it has not yet; else ZygoteError if it
        has not within timeout, or the zygote ended or was closed (the FIFOs are then the
        caller's to remove: Forked.close)."""
        with self.lock:
            try:
                if self.closed or self.forking is None:
                    raise ZygoteError("the zygote was closed")
                pid = self._await(lambda: self.current if self.current_token == token else
                                  -1 if self.unready == token else None, timeout)
                if pid == -1:  # it will never run: the caller gives it up (Forked.lost)
                    pid = None
                    if timeout > 0:
                        raise SpareLost("the spare ended before it ran")
                elif pid is None and timeout > 0:
                    raise ZygoteError("the spare did not report ready")
            except ZygoteError:
                self.forking = None
                raise
            if pid is not None:
                self.forking = None
                _unlink(fifos)
            return pid

    def status(self, pid: int, timeout: float, told: bool = False):
        """The spare's wait status (subprocess's convention: -N for signal N) once it has ended,
        or, with told (the caller saw no writer left on its output), as the spare told it itself
        when its command returned; else None after timeout; -SIGKILL if the zygote ended without
        telling. An `s` line read while the output was still open is dropped: the spare writes its
        own just before it closes the output, so such a line is another process's (or, read in
        those microseconds, the spare's own: its status then comes from the zygote)."""
        def found():
            if pid in self.ended:
                return self.ended.pop(pid)
            if told and pid in self.told:
                self.taken_told = pid  # its `x`, which follows, is not kept
                return self.told.pop(pid)
            return self._left(pid)

        with self.lock:
            try:
                return self._await(found, timeout)
            except ZygoteError:
                return -signal.SIGKILL
            finally:
                if not told:
                    self.told.pop(pid, None)

    def _left(self, pid: int):
        """A spare that stopped and has ended since (say, killed at its timeout): its status went
        to no one (the zygote reaped it on its own)."""
        if pid == self.left and _ended(pid):
            self.left = None
            return -signal.SIGKILL
        return None

    def _await(self, found, timeout: float):
        """Read the zygote's lines until found() gives something, or timeout: then None. Holds
        self.lock. ZygoteError at the zygote's end."""
        deadline = time.monotonic() + timeout
        drained = 0
        while True:
            got = found()
            if got is not None:
                return got
            try:
                ready, _, _ = select.select([self.out], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    if time.monotonic() >= deadline:
                        return None
                    continue
                data = os.read(self.out, 4096)
            except (OSError, ValueError):  # closed: it tells nothing any more
                data = b""
            if not data:
                raise ZygoteError("the zygote ended")
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                self._file(line)
            if len(self.buf) > 4096:  # not a line of ours; one of ours may be after it: its tail is kept
                self.buf = self.buf[-LINE_MAX:]
            drained += len(data)
            if drained >= DRAIN_MAX and time.monotonic() >= deadline:
                return found()  # a pipe that never runs dry (a flood) holds no one long past it

    def _file(self, line: bytes) -> None:
        """`r PID T` from the spare being forked: believed if T is the token it was given and PID
        is the zygote's child. `x STATUS T` from the zygote: the status of the spare of token T,
        taken once that spare has ended."""
        # Bytes a process of the sandbox wrote into the pipe with no newline end up before one of
        # our lines (each written whole, newline and all): the line is read from its last kind.
        line = line[max(0, line.rfind(b"r "), line.rfind(b"s "), line.rfind(b"x ")):]
        kind, _, rest = line.partition(b" ")
        try:
            if kind == b"r" and self.current is None and self.forking is not None:
                pid, _, token = rest.partition(b" ")
                if token == self.forking:
                    fields = _stat_fields(int(pid))
                    if fields is not None and int(fields[1]) == self.proc.pid:
                        self.current, self.current_token = int(pid), token
            elif kind == b"s" and self.current is not None:
                # `s STATUS PID` from the spare itself (TAIL): taken only by a caller that saw its
                # output end (status(told=True)), as it does once the spare has closed it; a line
                # another process wrote ends no call whose shell still holds its output
                status, _, pid = rest.partition(b" ")
                if int(pid) == self.current:
                    code = int(status)
                    self.told[self.current] = -(code - 128) if code > 128 else code
            elif kind == b"x" and self.current is None:
                # `x T` for the spare being forked, which never said it runs: the zygote skipped
                # its token (its command FIFO was gone) or it ended first (its output FIFO was
                # gone, or it was killed). Another process's line costs that spare, no more.
                if rest.partition(b" ")[2] == self.forking:
                    self.unready = self.forking
            elif kind == b"x":
                status, _, token = rest.partition(b" ")
                if token != self.current_token:
                    return  # another spare's (one a forged token made), or not the zygote's line
                code = int(status)  # bash's 128+N for a signal N, as Popen gives it: -N
                if _ended(self.current):
                    if self.current != self.taken_told:  # else its status was given out already
                        self.ended[self.current] = -(code - 128) if code > 128 else code
                elif code > 128:  # it stopped: the zygote waits for it no more, and will not tell its end
                    self.left = self.current
                else:
                    return  # not the zygote's line
                self.told.pop(self.current, None)
                self.current, self.taken_told = None, None
        except (ValueError, IndexError, OSError):
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.proc.stdin.close()  # at EOF the zygote's loop ends
        except OSError:
            pass
        if self.proc.poll() is None:  # not a pid that was reaped (and may be another's by now)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=1.5)
            except subprocess.TimeoutExpired:
                pass
        self.proc.stdout.close()
        _sweep(os.path.dirname(self.prefix), mine=os.path.basename(self.prefix))


def framed(command: bytes, lent: bool = False) -> bytes:
    """A command as a spare reads it, after a byte that says what follows it: `t`, TAIL; `l`,
    LENT_TAIL (a spare the controller holds); `n`, nothing, for a command that names `trap` (a
    DEBUG trap would run before each command of a tail, and an EXIT trap keeps it from closing
    anyway): the zygote tells that one's status."""
    return (b"n" if b"trap" in command else b"l" if lent else b"t") + command


class _Out:
    """The read end of a spare's output, shaped as Popen.stdout is where procs.run_streamed uses it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Forked:
    """A spare shell of the zygote: asked for (Zygote.order), ready() once it runs, given its
    command once, then waited for as a Popen is."""

    def __init__(self, zygote: Zygote, token: bytes, fifos: list, cmd_fd: int, out_fd: int, st_fd: int = -1) -> None:
        self.zygote, self.token, self.fifos = zygote, token, fifos
        self.pid: "int | None" = None
        self.cmd_fd = cmd_fd
        self.stdout = _Out(out_fd)
        self.st_fd = st_fd  # a lent spare's status FIFO (order(lend=True)), else -1
        self.returncode = None

    def ready(self, timeout: float = READY_WITHIN) -> bool:
        """Whether the spare runs (its ready line taken), waiting up to timeout for it; with a
        timeout, ZygoteError (its descriptors closed) if it has not by then or the zygote ended."""
        if self.pid is None:
            try:
                self.pid = self.zygote.ready(self.token, self.fifos, timeout)
            except ZygoteError:
                self.close()
                raise
            if self.pid is None:
                return False
            if self.st_fd < 0:  # (one to lend stays non-blocking: the controller reads it so)
                os.set_blocking(self.stdout.fd, True)
        return True

    def lost(self, names: bool = True) -> bool:
        """Asked for, not yet running, and it never will: the zygote said so (an `x` line of its
        token, read by ready()), or, with names, its FIFOs' names no longer name the FIFOs it was
        given (a process of the sandbox removed or replaced them: a command that empties the temp
        dir while the next spare is asked for ahead), which the zygote may not have come to yet.
        Then it is closed and the zygote may be asked again; else False."""
        if self.pid is not None or self.cmd_fd < 0:
            return False
        if self.zygote.unready != self.token:
            if not names:
                return False
            try:
                ours = all(os.path.samestat(os.lstat(path), os.fstat(fd))
                           for path, fd in zip(self.fifos, self.fds(), strict=True))
            except OSError:
                ours = False
            if ours:
                return False
        with self.zygote.lock:
            if self.zygote.forking == self.token:
                self.zygote.forking = None
        self.close()
        return True

    def fds(self) -> tuple:
        """Its descriptors (command, output, and a lent one's status): what the lender hands the
        controller, then closes its copies of (close()); the spare reads its command's end when
        the controller closes the last."""
        return (self.cmd_fd, self.stdout.fd) + ((self.st_fd,) if self.st_fd >= 0 else ())

    def close(self) -> None:
        """Its descriptors (and FIFOs, if it never said it runs), as a spare never given a
        command: it reads an empty one and ends."""
        if self.pid is None:
            _unlink(self.fifos)
        if self.cmd_fd >= 0:
            os.close(self.cmd_fd)
            self.cmd_fd = -1
        if self.st_fd >= 0:
            os.close(self.st_fd)
            self.st_fd = -1
        self.stdout.close()

    def give(self, data: bytes) -> bool:
        """Its command (it fits an empty FIFO, with the byte before it: framed()); at our close
        it reads EOF. False if the FIFO did not take it all (something else filled it): then the
        spare is not used."""
        data = framed(data)
        try:
            done = os.write(self.cmd_fd, data) == len(data)
        except BlockingIOError:
            done = False
        if done:
            os.close(self.cmd_fd)
            self.cmd_fd = -1
            if self.st_fd >= 0:  # a spare forked to lend, run by the agent: its status comes to the agent
                os.close(self.st_fd)
                self.st_fd = -1
        return done

    def poll(self):
        return self.wait(0)

    def gone(self) -> bool:
        """It has ended and the zygote has reaped it (a zombie still counts as there)."""
        return _reaped(self.pid)

    def wait(self, timeout: float | None = None):
        """Popen.wait; with no timeout, never longer than twice STATUS_WITHIN once asked: a zygote
        stopped by a process of the sandbox must not hold the agent."""
        if self.returncode is None:
            told = self._output_over()
            rc = self.zygote.status(self.pid, STATUS_WITHIN if timeout is None else timeout, told)
            if rc is None and timeout is None:
                # A zygote stopped by a process of the sandbox holds the status (or the zombie): it
                # is let go on to tell it, then replaced.
                if self.zygote.alive():
                    try:
                        os.kill(self.zygote.proc.pid, signal.SIGCONT)
                    except OSError:
                        pass
                rc = self.zygote.status(self.pid, STATUS_WITHIN, told)
                self.zygote.close()
                rc = -signal.SIGKILL if rc is None else rc
            self.returncode = rc
        return self.returncode

    def _output_over(self) -> bool:
        """No writer is left on its output (POLLHUP): the spare has closed it, and so has every
        process it started. One poll(2)."""
        if self.stdout.fd < 0:
            return False
        p = select.poll()
        p.register(self.stdout.fd, 0)
        return any(ev & select.POLLHUP for _, ev in p.poll(0))

    def discard(self) -> None:
        """Never used: it reads an empty command and ends; its group is killed to be sure."""
        if self.pid is None:
            try:
                self.ready()
            except ZygoteError:
                return  # closed: it reads an empty command, if it ever runs
        if self.cmd_fd >= 0:
            os.close(self.cmd_fd)
            self.cmd_fd = -1
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.wait(1.5)
        self.close()
