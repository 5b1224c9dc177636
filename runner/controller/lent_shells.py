"""A bash call straight to its shell: the agent lends the controller each spare shell it forks,
and the controller writes the command into it and reads its output and status itself.

Why: on the agent's path a bash call wakes four processes in turn (controller -> agent -> spare
-> agent -> controller), where a local fork wakes two, and on a VM each wake-up of an idle vCPU
is what a call pays for (DESIGN.md, speed). Lent, the call's path is controller -> spare ->
controller; the agent forks the next spare and lends it while the controller ends this call.

How: where the protocol runs on the controller's socket (runner/controller/channel.py), the controller
sends `lend` after the hello. From then on the agent sends each spare, once it runs, as a
`spare` line with three descriptors (SCM_RIGHTS): the write end of its command FIFO, the read end
of its output FIFO, and the read end of a status FIFO on which the zygote holds the write end
while the spare runs (agent/zygote.py: LENT_TAIL writes `s STATUS PID` there once the
command returns, then closes the output). The controller takes a spare for a call that the
agent would have run in a spare too (command(): no cwd, stdin or background, no `$$`), writes
`l` and the command, closes the FIFO (the spare reads its end, then evals), streams the output
to the call's sink until its end, and takes the status from the status FIFO; where the shell
gave none (it ran `exit`, `exec`, a trap, or was killed) the agent tells the zygote's
(`lent_status`); at the timeout the agent ends the spare's group (`lent_kill`). Out-of-memory
kills are read from the container's own memory cgroup, on this machine (oom_counter).

What the controller trusts of it: nothing more than of the agent's result. The descriptors are
taken only with an authenticated `spare` line, at most three at a time, close-on-exec, and
only FIFOs (Spare.of); they are read and written non-blocking, so a process of the sandbox that
empties or fills them holds no controller. A status or an output a sandbox forges is its own
call's: the same as an agent it took over could say.
"""
from __future__ import annotations

import array
import codecs
import fcntl
import os
import re
import select
import socket
import stat
import time

from ..agent import oom, procs, zygote

# The tools whose calls go to a lent shell, with the arguments that keep them on the agent's path
# when set (a directory other than the workspace, a background job), are their specs' lent_unless
# (registry.lent_tools()); an argument given at all (stdin, even empty: the agent's shell then reads
# a pipe, not /dev/null) keeps any call there.
GIVEN = ("input",)
FDS = 3  # a spare's descriptors: command, output, status
ACCESS = [os.O_RDWR, os.O_RDONLY, os.O_RDONLY]  # their access modes (the command's: a writer that never waits for a reader)
HELD = 2  # spares the controller holds at most: one per zygote of the agent's lender
ANC_SPACE = socket.CMSG_SPACE(FDS * array.array("i").itemsize)  # a recvmsg takes no more than one spare's
CHUNK = 64 * 1024
DRAIN_MAX = 1 << 20  # bytes read from a FIFO past the point the call waits for nothing more
HOLD = 0.002  # seconds only the output's end wakes the controller, as the agent's run_streamed
CLOSE_WITHIN = 0.005  # seconds the output has to end once the status FIFO can be read (the shell writes
# its line there just before it closes its output); else the line is another process's, dropped
IDLE_CHECK = 0.1  # seconds between asks, while the output is idle, whether the shell has ended
IDLE_END = 0.2  # seconds of idle output after the shell's end: what is left holding it runs in the background
ASK_WITHIN = 30.0  # seconds the agent may take to answer a lent_status or lent_kill
_STATUS = re.compile(rb"(?:^|\n)s (\d{1,3}) (\d+)\n")


def command(tool: str, args: dict) -> "bytes | None":
    """The call's command, as a lent shell takes it, if the call may go to one (the agent would
    run it in a spare: procs._start); None sends it to the agent, which also says what is wrong
    with one it refuses."""
    from ..tools.schemas.registry import lent_tools

    keep = lent_tools().get(tool)
    text = args.get("command")
    if keep is None or any(args.get(name) for name in keep) or any(args.get(name) is not None for name in GIVEN):
        return None
    if not isinstance(text, str) or not text.strip():
        return None
    if "\0" in text or procs.needs_own_shell(text):
        return None
    try:
        data = os.fsencode(text)
    except UnicodeError:
        return None
    return data if len(data) <= procs.SPARE_MAX else None


class Spare:
    """A shell the agent lent: its pid (in the sandbox) and the controller's ends of its FIFOs."""

    def __init__(self, pid: int, cmd: int, out: int, st: int) -> None:
        self.pid, self.cmd, self.out, self.st = pid, cmd, out, st

    @classmethod
    def of(cls, msg: dict, fds: list) -> "Spare | None":
        """The spare a `spare` line and its descriptors name; None (the descriptors closed)
        unless they are three FIFOs and the pid a number. They are close-on-exec (received so:
        a flag of the descriptor, not of the file description the sender shares). Whether the
        description is non-blocking the sender can change at any time, so no read or write of
        ours relies on it: each goes through Via, non-blocking by itself (nowait())."""
        pid = msg.get("pid")
        try:  # three FIFOs, opened as the agent opens them: a splice of a wrong one raises
            ok = (len(fds) == FDS and isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
                  and all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in fds)
                  and [fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE for fd in fds] == ACCESS)
        except OSError:
            ok = False
        if not ok:
            close_all(fds)
            return None
        return cls(pid, *fds)

    def close(self) -> None:
        close_all([self.cmd, self.out, self.st])
        self.cmd = self.out = self.st = -1


def close_all(fds) -> None:
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def received(ancillary) -> list:
    """The descriptors of a recvmsg's ancillary data (SCM_RIGHTS)."""
    fds: list = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(data[:len(data) - len(data) % got.itemsize])
            fds.extend(got)
    return fds


def oom_counter(pid: int, container_id: str) -> "int | None":
    """A descriptor of the out-of-memory counter of the memory cgroup process pid is in (as this
    machine sees it: /proc/PID/cgroup, then /sys/fs/cgroup), if that cgroup names container_id;
    else None. cgroup v2's memory.events, or v1's memory.oom_control (both count `oom_kill`)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    places = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if container_id and container_id in path and ".." not in path.split("/"):
            if controllers == "":
                places.append(f"/sys/fs/cgroup{path}/memory.events")
            elif "memory" in controllers.split(","):
                places.append(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
    for place in places:
        try:
            fd = os.open(place, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        if oom_kills(fd) is not None:
            return fd
        os.close(fd)
    return None


def oom_kills(fd: "int | None") -> "int | None":
    """The counter oom_counter() opened, read again (agent/oom.py's parse)."""
    if fd is None:
        return None
    try:
        return oom.count(os.pread(fd, 4096, 0))
    except OSError:
        return None


class Via:
    """A pipe of the controller's own, through which every byte of a lent shell's FIFOs goes
    (splice with SPLICE_F_NONBLOCK): the FIFOs' file descriptions are shared with the sender, who
    may make them blocking at any time (an agent the sandbox took over), and a read of an empty
    one or a write into a full one must still come back at once, or a call would hold the
    controller past its timeout. Reads and writes of a named FIFO take no RWF_NOWAIT here."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)  # (ours never waits either)

    def read(self, fd: int) -> "bytes | None":
        """What can be read from fd now: b"" at its end (no writer left), None if nothing is
        there (another process of the sandbox took it)."""
        try:
            n = os.splice(fd, self.w, CHUNK, flags=os.SPLICE_F_NONBLOCK)
        except BlockingIOError:
            return None
        return self._take(n) if n else b""

    def _take(self, n: int) -> bytes:
        """The n bytes in our pipe: a read returns one packet at a time when a writer of the
        FIFO made it a packet pipe (O_DIRECT), so it is read until all n are out."""
        got = b""
        while len(got) < n:
            got += os.read(self.r, n - len(got))
        return got

    def write(self, fd: int, data: bytes) -> bool:
        """Whether data (SPARE_MAX at most) went into fd whole, at once: False if our pipe or
        fd's would not take it all, or fd has no reader left."""
        try:
            if os.write(self.w, data) < len(data):  # (a pipe made smaller than 64 KiB: a user over its pages)
                self._drop()
                return False
            n = os.splice(self.r, fd, len(data), flags=os.SPLICE_F_NONBLOCK)
        except (BlockingIOError, BrokenPipeError):
            n = 0
        if n < len(data):
            self._drop()
            return False
        return True

    def _drop(self) -> None:
        """Whatever is left in our pipe."""
        try:
            while os.read(self.r, CHUNK):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        close_all([self.r, self.w])


_nowait: "bool | None" = None


def nowait() -> bool:
    """Whether this kernel moves bytes between pipes without waiting when asked per call
    (splice's SPLICE_F_NONBLOCK, whatever the FIFO's own flags): without it nothing is lent."""
    global _nowait
    if _nowait is None:
        r, w = os.pipe()  # blocking, as a sender could make a lent FIFO
        via = None
        try:
            via = Via()
            _nowait = via.read(r) is None and via.write(w, b"x") and via.read(r) == b"x"
        except (OSError, AttributeError, ValueError):
            _nowait = False
        finally:
            close_all([r, w])
            if via is not None:
                via.close()
    return _nowait


def _status(buf: bytes, pid: int) -> "int | None":
    """The last `s STATUS PID` line in buf of this spare's pid."""
    found = None
    for m in _STATUS.finditer(buf):
        if int(m[2]) == pid and int(m[1]) <= 255:
            found = int(m[1])
    return found


def run(spare: Spare, data: bytes, timeout: float, on_output, ask, aside=None) -> "tuple[int, bool] | None":
    """Run data (command()) in the lent spare: (exit code, timed out), its output given to
    on_output as text as it comes; None if the spare is gone or would not take the command,
    which then never ran (the call goes to the agent). ask(op, **kw): a round trip to the agent.
    aside: (descriptor, handler) served while the shell runs, the agent's channel: its next
    spare is taken then, off the next call's path; the handler says False when it is done."""
    poll = select.poll()
    poll.register(spare.out, 0)
    poll.register(spare.st, 0)
    if poll.poll(0):  # no writer left on its output (the shell has ended since it was lent) or on
        return None   # its status FIFO (its zygote has: nothing would tell the status)
    poll.unregister(spare.st)
    via = Via()
    try:
        return _run(spare, data, timeout, on_output, ask, poll, via, aside)
    finally:
        via.close()


def _aside(ready, poll, aside):
    """Serve aside's descriptor if it is ready; the aside still served (None once it is done)."""
    if aside is not None and any(fd == aside[0] for fd, _ in ready) and not aside[1]():
        poll.unregister(aside[0])
        return None
    return aside


def _run(spare: Spare, data: bytes, timeout: float, on_output, ask, poll, via: Via, aside) -> "tuple[int, bool] | None":
    framed = zygote.framed(data, lent=True)
    if not via.write(spare.cmd, framed):  # something filled its FIFO: it waits for its command's end, which it never reads
        ask("lent_kill", pid=spare.pid)
        return None
    os.close(spare.cmd)
    spare.cmd = -1
    if aside is not None and aside[1]():  # (what is read already is served at once: the poll
        poll.register(aside[0], select.POLLIN)  # wakes only for what comes)
    else:
        aside = None
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    start = time.monotonic()
    deadline, quiet_until = start + timeout, start + HOLD
    ended_at = 0.0  # when the agent said the shell has ended (children it left may hold the output)
    checked = start  # when the agent was last asked whether it has
    st_seen = 0.0  # when the status FIFO was seen readable while the output was open
    last_out = start  # when output last came: a pause is HOLD without any (a poll the aside woke is none)
    timed_out = False
    while True:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            ask("lent_kill", pid=spare.pid)
            _drain(via, spare.out, dec, on_output)  # what it wrote before it was killed (bounded)
            break
        wait = min(IDLE_CHECK, deadline - now)
        if quiet_until:  # most commands end within it: one wake-up, at the output's end
            if now < quiet_until:
                ready = poll.poll(min(wait, quiet_until - now) * 1000)
                if aside is not None and ready and all(fd == aside[0] for fd, _ in ready):
                    aside = _aside(ready, poll, aside)
                    continue
                if not ready:
                    continue
            quiet_until = 0.0
            poll.modify(spare.out, select.POLLIN)
            poll.register(spare.st, select.POLLIN)
        if st_seen:
            wait = min(wait, max(0.0, st_seen + CLOSE_WITHIN - now))
        if ended_at:  # once the shell has ended, the first pause in the output past IDLE_END ends the call
            wait = min(wait, HOLD)
        ready = dict(poll.poll(wait * 1000))
        aside = _aside(ready.items(), poll, aside)
        if spare.out in ready:
            got = via.read(spare.out)
            if got == b"":
                break
            if got:
                last_out = time.monotonic()
                _give(on_output, dec.decode(got))
        if spare.st in ready:
            if not ready[spare.st] & select.POLLIN:  # its writer is gone: the zygote has reaped the spare
                poll.unregister(spare.st)
                st_seen = None
            elif not st_seen:  # the shell's own line comes just before it closes its output: wait for that
                st_seen = time.monotonic()
                poll.modify(spare.st, 0)
        now = time.monotonic()
        if st_seen and now - st_seen >= CLOSE_WITHIN:
            # The output did not end with it: another process's line (or a flood of them), which
            # is dropped, as the shell's own line would be read only at the output's end.
            _drain(via, spare.st, None, None)  # (bounded: a writer that never stops holds no call)
            st_seen = 0.0
            poll.modify(spare.st, select.POLLIN)
        if not ended_at and now - checked >= IDLE_CHECK:
            # Has the shell ended, with children holding its output? The zygote's word, through
            # the agent, asked on a clock whether or not output flows (a status line is believed
            # only at the output's end, or another process's line would end a call whose shell
            # still runs).
            checked = now
            if ask("lent_status", pid=spare.pid, wait=0).get("status") is not None:
                ended_at = now
        elif ended_at and spare.out not in ready and now - ended_at > IDLE_END and now - last_out >= HOLD:
            break  # what is left holding the output runs in the background
    _give(on_output, dec.decode(b"", final=True))
    if timed_out:
        return 124, True
    got = via.read(spare.st)  # the shell's own line, written just before it closed its output
    status = None if ended_at or not got else _status(got, spare.pid)
    if status is None:  # it gave none (exit, exec, a trap, a signal), or left children holding the
        # output, or closed its output and runs on: as a call's end, the zygote's word through the
        # agent, which waits KILL_GRACE for it and then kills the shell's group
        status = ask("lent_status", pid=spare.pid, wait=None).get("status")
    return (status if isinstance(status, int) else 128 + 9), False


def _drain(via: Via, fd: int, dec, on_output) -> None:
    """What is in a FIFO now, up to DRAIN_MAX bytes, without waiting for more: given to
    on_output (None: dropped). A writer that keeps it full holds no one past that."""
    drained = 0
    while drained < DRAIN_MAX:
        got = via.read(fd)
        if not got:
            return
        drained += len(got)
        if on_output is not None:
            _give(on_output, dec.decode(got))


def _give(on_output, text: str) -> None:
    if text and on_output is not None:
        on_output(text)
