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

The zygote's protocol (its stdin and stdout, pipes to the agent): the agent writes a path prefix
P per spare; the spare opens P.in (its command) and P.out (its stdout and stderr), both FIFOs the
agent made and opened first, then writes `r PID`; the zygote waits for it as a foreground job and
writes `x STATUS` when it has ended. One spare at a time, so a status is that spare's.
The FIFOs are unlinked once the spare holds them. Everything in the sandbox is one user, so a
process there can write into these pipes: a line that does not parse is dropped, and at worst a
sandbox confuses its own exit codes, which the controller never trusted.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time

TRAPPED = "TERM INT HUP QUIT USR1 USR2"
# One line (a command's $LINENO counts from the eval). The zygote traps signals with a handler, not
# ignores them: `kill` of it by a call does nothing, and a fork gets the defaults back (an ignored
# signal would stay ignored in every call). Job control (set -m) gives each spare its own process
# group; the spare turns it off again, as `bash -c` has it. The spare is a foreground subshell, not
# `&`: that would leave its pid in the next spare's `$!`. A spare that stops is still a job then
# (`jobs %%`): `wait -f` waits for its end, as the agent's waitpid would (bash >= 5.1; an older
# bash's wait fails there, and the stopped spare's call gets status 2).
SCRIPT = ("set -m; trap : " + TRAPPED + "; while IFS= read -r __runner_d; do "
          "( trap - " + TRAPPED + "; set +m; exec 3<\"$__runner_d.in\" 4>\"$__runner_d.out\"; "
          'printf "r %s\\n" "$BASHPID"; exec </dev/null >&4 2>&4 4>&-; '
          'IFS= read -r -d "" -N 1073741823 -u 3 __runner_cmd; exec 3<&-; '
          'eval "unset __runner_cmd __runner_d __runner_s;$__runner_cmd" ); __runner_s=$?; '
          'jobs %% >/dev/null 2>&1 && { wait -f %%; __runner_s=$?; }; printf "x %s\\n" "$__runner_s"; done')
READY_WITHIN = 2.0  # seconds a spare may take to report ready before the zygote is given up
STATUS_WITHIN = 1.0  # seconds the zygote may take to tell a status once the spare has ended


class ZygoteError(Exception):
    """The zygote is gone or does not answer: start the call's shell directly."""


class Zygote:
    """One clean bash that forks spares, one at a time: it waits for each (a foreground job)."""

    def __init__(self, bash: str, cwd: str, env: dict) -> None:
        self.cwd, self.env = cwd, env
        self.dir = tempfile.mkdtemp(prefix="runner-agent-")  # 0700
        self.lock = threading.Lock()
        self.buf = b""
        self.current: "int | None" = None  # the spare forked and not ended
        self.ended: dict[int, int] = {}
        self.count = 0
        try:
            self.proc = subprocess.Popen([bash, "-c", SCRIPT], cwd=cwd, env=env, start_new_session=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.out = self.proc.stdout.fileno()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self) -> "Forked":
        """A new spare, ready for its command. ZygoteError if the zygote cannot make one."""
        with self.lock:
            if self.current is not None:
                raise ZygoteError(f"the zygote still waits for its spare {self.current}")
            self.count += 1
            base = f"{self.dir}/{self.count}"
            fds = []
            try:
                os.mkfifo(base + ".in", 0o600)
                os.mkfifo(base + ".out", 0o600)
                # O_RDWR: the spare's open of P.in never waits for a writer; O_NONBLOCK on P.out: nor ours
                fds.append(os.open(base + ".in", os.O_RDWR | os.O_CLOEXEC))
                fds.append(os.open(base + ".out", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                self.proc.stdin.write(os.fsencode(base) + b"\n")
                self.proc.stdin.flush()
                pid = self._await(lambda: self.current, READY_WITHIN, late="the spare did not report ready")
            except (OSError, ValueError, ZygoteError) as e:
                for fd in fds:
                    os.close(fd)
                raise ZygoteError(f"no spare from the zygote: {e}") from None
            finally:
                for suffix in (".in", ".out"):
                    try:
                        os.unlink(base + suffix)
                    except OSError:
                        pass
            os.set_blocking(fds[1], True)
            return Forked(self, pid, fds[0], fds[1])

    def status(self, pid: int, timeout: float):
        """The spare's wait status (subprocess's convention: -N for signal N) once it has ended,
        else None after timeout; -SIGKILL if the zygote ended without telling."""
        with self.lock:
            try:
                rc = self._await(lambda: self.ended.get(pid), timeout)
            except ZygoteError:
                return -signal.SIGKILL
            self.ended.pop(pid, None)
            return rc

    def _await(self, found, timeout: float, late: "str | None" = None):
        """Read the zygote's lines until found() gives something, or timeout: then None, or
        ZygoteError(late) if late is given. Holds self.lock. ZygoteError at the zygote's end."""
        deadline = time.monotonic() + timeout
        while True:
            got = found()
            if got is not None:
                return got
            ready, _, _ = select.select([self.out], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                if time.monotonic() >= deadline:
                    if late:
                        raise ZygoteError(late)
                    return None
                continue
            data = os.read(self.out, 4096)
            if not data:
                raise ZygoteError("the zygote ended")
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                self._file(line.split())
            if len(self.buf) > 4096:  # not a line of ours
                self.buf = b""

    def _file(self, words: list) -> None:
        """`r PID` from a spare that is ready; `x STATUS` from the zygote when it has ended."""
        try:
            if words[0] == b"r" and len(words) == 2 and self.current is None:
                self.current = int(words[1])
            elif words[0] == b"x" and len(words) == 2 and self.current is not None:
                code = int(words[1])  # bash's 128+N for a signal N, as Popen gives it: -N
                self.ended[self.current] = -(code - 128) if code > 128 else code
                self.current = None
        except (ValueError, IndexError):
            pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # at EOF the zygote's loop ends
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=1.5)
        except subprocess.TimeoutExpired:
            pass
        self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _zombie_status(pid: int):
    """The exit status a zombie holds for its parent (/proc/PID/stat's exit_code), as Popen gives it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] != b"Z":
            return None
        return os.waitstatus_to_exitcode(int(fields[49]))
    except (OSError, IndexError, ValueError):
        return None


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
    """A spare shell of the zygote: given its command once, then waited for as a Popen is."""

    def __init__(self, zygote: Zygote, pid: int, cmd_fd: int, out_fd: int) -> None:
        self.zygote, self.pid = zygote, pid
        self.cmd_fd = cmd_fd
        self.stdout = _Out(out_fd)
        self.returncode = None

    def give(self, data: bytes) -> None:
        """Its command (fits the FIFO's buffer: the write never blocks); at our close it reads EOF."""
        try:
            os.write(self.cmd_fd, data)
        finally:
            os.close(self.cmd_fd)
            self.cmd_fd = -1

    def poll(self):
        return self.wait(0)

    def wait(self, timeout: float | None = None):
        """Popen.wait, but never longer than STATUS_WITHIN: a zygote stopped by a process of the
        sandbox must not hold the agent (the status is then lost: -SIGKILL, and the zygote is
        replaced)."""
        if self.returncode is None:
            rc = self.zygote.status(self.pid, STATUS_WITHIN if timeout is None else timeout)
            if rc is None and timeout is None:  # the zygote does not reap: its zombie child still tells
                rc = _zombie_status(self.pid)
                rc = self.zygote.status(self.pid, 0) if rc is None else rc
                self.zygote.close()
                rc = -signal.SIGKILL if rc is None else rc
            self.returncode = rc
        return self.returncode

    def discard(self) -> None:
        """Never used: it reads an empty command and ends; its group is killed to be sure."""
        if self.cmd_fd >= 0:
            os.close(self.cmd_fd)
            self.cmd_fd = -1
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.wait(1.5)
        self.stdout.close()
