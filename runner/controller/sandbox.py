"""A Sandbox: one in-sandbox agent process, reached over its stdin/stdout (JSON lines), or over
the unix socket of runner/controller/channel.py where the engine runs containers on this machine.

The executor decides where the process runs (a container, a subprocess, an SSH host); the
protocol is the same everywhere. A call writes one request line and reads lines until its
result: `output` events are streamed to a callback, so a flood never piles up in memory.
The hello carries a fresh key; every later line either way is authenticated and bounded
(agent/wire.py): a line the agent did not write, or one too long, ends the sandbox.
"""
from __future__ import annotations

import collections
import json
import os
import select
import socket
import threading
import time
from typing import Callable

from executors import ExecRequest, Executor, ExecutorError, SandboxGone
from executors.models import OOM_EXIT

from . import bundle, channel, lent_shells as lent
from ..errors import RunnerError
from ..agent import procs, wire

START_TIMEOUT = 60.0
RECV_CHUNK = 64 * 1024  # bytes asked of the agent's socket at a time: a recv of 1 MiB cost 30-45 us
# of CPU more a call here (a buffer that size is allocated and given back every time)
MAX_LINE = wire.MAX_LINE
LEND_WAIT = 0.05  # seconds a call that may go to a lent shell waits for the agent's next spare


class SandboxDied(SandboxGone):
    """The agent (or its container) ended or stopped answering; the sandbox must be replaced.
    SandboxGone as the controller sees it: `except SandboxGone` catches both."""


class NoSandbox(RunnerError):
    """No sandbox could be started for an op: the message says why."""


class Sandbox:
    def __init__(self, executor: Executor, hello: dict, *, python: str = "python3", cwd: str | None = None,
                 env: dict[str, str] | None = None, listener=None, stdio_executor=None) -> None:
        self.executor = executor
        self._listener = listener  # runner/controller/channel.py's, where the agent can connect to this machine
        self._stdio_executor = stdio_executor  # makes the same sandbox's executor without the channel's mount
        self._conn = None  # the agent's connection, once it made it; else the protocol runs on stdio
        self._conn_poll = None  # waits on _conn (made once, at the accept)
        self._drainer: threading.Thread | None = None  # reads the agent's stdio while the protocol is on _conn
        self.hello_msg = {"op": "hello", **hello}
        self.python = python
        self.cwd = cwd
        self.env = env or {}
        self.proc = None
        self.info: dict = {}
        self._key = os.urandom(32)
        self._tx = wire.Signer(wire.direction_key(self._key, wire.TO_AGENT))
        self._rx = wire.Verifier(wire.direction_key(self._key, wire.FROM_AGENT))
        self._lines = wire.LineBuffer(MAX_LINE)
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=32)
        self.dead: str | None = None
        self.retired: str | None = None  # why this sandbox serves no further call (it still answered this one)
        self.used = False
        self.started_at = 0.0
        # Shells lent by the agent (runner/controller/lent_shells.py), where the protocol is on the socket
        self._oom_fd: int | None = None  # the container's out-of-memory counter, as this machine sees it
        self._lending = False  # the agent was asked to lend its spares
        self._expect = False  # a spare is on its way (the agent asked for the next as it lent the last)
        self._spares: collections.deque[lent.Spare] = collections.deque()  # lent and not yet used
        self._fds: list[int] = []  # descriptors received and not yet taken with their `spare` line
        self._lent_lock = threading.Lock()  # those two, against close() from another thread

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> "Sandbox":
        t0 = time.monotonic()
        bundle.prepare()
        try:  # any failure from here closes what was made (a container may exist, unstarted)
            try:
                self._spawn()
            except Exception as e:
                if self._listener is None or self._stdio_executor is None or self._listener.dir not in str(e):
                    raise
                # The engine could not mount the channel's directory (it does not see this
                # machine's /run after all): the same sandbox on stdio, and no socket again.
                self._listener.close()
                self._listener = None
                self.hello_msg.pop("channel", None)
                self._close_process()
                self.executor.stop()
                self.executor = self._stdio_executor()
                self._spawn()
            self.proc.write(bundle.payload())
            hello = json.dumps({**self.hello_msg, "key": self._key.hex()}, ensure_ascii=False).encode("utf-8")
            self.proc.write(hello + b"\n")
            deadline = time.monotonic() + timeout
            if self._listener is not None:
                self._await_agent(deadline)
            reply = self._next(deadline)
        except BaseException:
            self.close()
            raise
        if reply.get("op") != "hello" or not reply.get("ok"):
            self.close()
            raise SandboxDied(f"the agent did not start: {reply}")
        self.info = reply
        if self._oom_fd is not None and not self.hello_msg.get("single_call") and lent.nowait():
            self._lending = self._expect = True  # (on the socket: a recvmsg from now on, for the descriptors)
            self._send({"op": "lend"})
        self.started_at = time.monotonic() - t0
        return self

    def _spawn(self) -> None:
        self.executor.start()
        # own_init: the agent is pid 1 of a fresh container and reaps orphans itself, so no
        # docker-init (dumpable, holding the same stdio) sits in front of the channel.
        self.proc = self.executor.spawn(ExecRequest(argv=bundle.argv(self.python), cwd=self.cwd, env=self.env,
                                                    own_init=True))

    def _await_agent(self, deadline: float) -> None:
        """Take the agent's connection to the listener; or, if it answered on stdio (it could not
        connect), go on there. The socket is gone either way once this returns."""
        listener, self._listener = self._listener, None
        poll = select.poll()
        poll.register(listener.fileno(), select.POLLIN)
        try:
            while True:
                if poll.poll(5):
                    conn = listener.accept()
                    container = getattr(getattr(self.proc, "container", None), "id", "") or ""
                    pid = channel.peer_pid(conn)
                    if not channel.in_container(pid, container):
                        conn.close()
                        self._die(f"a process that is not this sandbox's (pid {pid}) connected to its channel "
                                  "first; the sandbox is not used", kill=True, words=False)
                    self._conn = conn
                    self._oom_fd = lent.oom_counter(pid, container)  # None: no lending (its kills unseen)
                    self._conn_poll = select.poll()
                    self._conn_poll.register(conn.fileno(), select.POLLIN)
                    self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True,
                                                     name="runner-sandbox-stderr")
                    self._drainer.start()
                    return
                item = self.proc.read(timeout=0)  # an answer on stdio (the fallback) is rare: never wait on it
                if item is not None:
                    stream, data = item
                    if stream == "stdout":
                        self._lines.feed(data)
                        return  # the hello's answer comes this way: stdio it is
                    if stream == "stderr":
                        self._stderr.append(data[-2000:])
                    else:  # the agent ended before it connected
                        self._ended()
                if time.monotonic() > deadline:
                    self._die("the agent did not start in time", kill=True)
        finally:
            listener.close()

    def _drain(self, proc) -> None:
        """With the protocol on the socket, the agent's stdio carries only its own messages: keep
        their tail (its last words) and never let them fill the transport (the agent would block)."""
        while True:
            item = proc.read(timeout=None)
            if item is None:
                continue
            stream, data = item
            if stream == "eof":
                return
            if stream == "stderr":
                self._stderr.append(data[-2000:])

    def _close_process(self) -> None:
        """End the agent's process and its channel (not the executor)."""
        self._end_process(*self._hang_up())

    def _hang_up(self):
        """Tell the agent to shut down and close its channel, at once: (proc, conn) to end."""
        proc, self.proc = self.proc, None
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if not self.dead:
                    conn.sendall(self._tx.frame({"op": "shutdown"}))
            except OSError:
                pass
            try:  # wakes a call of another thread waiting on it: it ends as SandboxDied
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        return proc, conn

    def _end_process(self, proc, conn, kill: bool = False) -> None:
        """Wait for the agent's process to end (killed after 2 s, or at once: kill) and let it go
        (a container is removed with it)."""
        if proc is not None:
            try:
                if kill:
                    proc.kill()
                elif not self.dead and conn is None:
                    proc.write(self._tx.frame({"op": "shutdown"}))
                proc.close_stdin()
                if proc.wait(timeout=2) is None:
                    proc.kill()
            except Exception:
                proc.kill()
            finally:
                proc.close()

    def close(self, background: bool = False, kill: bool = False) -> None:
        """Close the sandbox: nothing is called in it from now on. background: its process's end
        and its container's removal are left to runner/controller/finisher.py (a Runner's close answers at
        once; the process still removes the container before it exits). kill: the agent is not
        asked to end (it may be busy with an op that is being stopped): killed at once."""
        if self._listener is not None:  # never started far enough to take the connection
            self._listener.close()
            self._listener = None
        proc, conn = self._hang_up()
        with self._lent_lock:  # (a call of another thread takes no spare and keeps no descriptor after this)
            self._lending = False
            spares, self._spares = list(self._spares), collections.deque()
            fds, self._fds = self._fds, []
        for spare in spares:
            spare.close()
        lent.close_all(fds)
        if self._oom_fd is not None:
            lent.close_all([self._oom_fd])
            self._oom_fd = None

        def finish() -> None:
            self._end_process(proc, conn, kill)
            try:
                self.executor.stop()
            except Exception:
                pass

        if background:
            from . import finisher

            finisher.later(finish)
        else:
            finish()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.dead is None and self.retired is None and not self.proc.ended()

    # -- calls --------------------------------------------------------------------------
    def call(self, call_id: str, tool: str, args: dict, timeout: float,
             on_output: Callable[[str], None] | None = None) -> dict:
        """Send one call and return its raw result message. Raises SandboxDied."""
        if not self.alive:
            raise SandboxDied(self.dead or "the sandbox is closed")
        self.used = True
        msg = None
        if self._lending:
            command = lent.command(tool, args)
            if command is not None:
                msg = self._call_lent(call_id, command, args, time.monotonic() + timeout, on_output)
        if msg is None:
            msg = self._call_agent(call_id, tool, args, timeout, on_output)
        if isinstance(msg.get("meta"), dict) and msg["meta"].get("oom_killed"):
            # The memory limit may have killed any process in it (a background job, a
            # server the agent started): what is left is not the sandbox the caller had.
            self.retired = "an out-of-memory kill"
            msg["content"] = f"{msg.get('content') or ''}; a fresh sandbox will serve the next call"
        return msg

    def _call_agent(self, call_id: str, tool: str, args: dict, timeout: float, on_output) -> dict:
        self._send({"op": "call", "id": call_id, "tool": tool, "args": args})
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline)
            op = msg.get("op")
            if op == "output" and msg.get("id") == call_id:
                if on_output is not None:
                    on_output(msg.get("data", ""))
            elif op == "result" and msg.get("id") == call_id:
                last = msg.pop("output", None)  # the call's last output rides with its result
                if isinstance(last, str) and last and on_output is not None:
                    on_output(last)
                return msg
            # anything else (a stale event, a log line) is ignored

    def _call_lent(self, call_id: str, command: bytes, args: dict, deadline: float, on_output) -> "dict | None":
        """The call in a shell the agent lent (runner/controller/lent_shells.py); None if there is none, or it
        did not take the command (which then never ran): the call goes to the agent. deadline:
        the call's, past which the agent's answers are not waited for (SandboxDied)."""
        timeout = float(args.get("timeout") or 120)
        before = lent.oom_kills(self._oom_fd)
        ran = None
        for _ in range(lent.HELD + 1):  # (a spare that had ended, or would not take the command, which
            if not self._spares and self._expect:  # then never ran: the next)
                self._next(time.monotonic() + LEND_WAIT, spare=True)
                self._expect = bool(self._spares)  # none came: wait again only once one has
            with self._lent_lock:
                spare = self._spares.popleft() if self._spares else None
            if spare is None:
                return None
            conn = self._conn  # (close() of another thread may clear it meanwhile)
            aside = None if conn is None or conn.fileno() < 0 else (conn.fileno(), self._take_waiting)
            try:
                ran = lent.run(spare, command, timeout, on_output, lambda op, **kw: self._ask(op, deadline, **kw), aside)
            except OSError as e:  # no descriptor the agent sends does this: they are not what it sends
                self._die(f"a shell the agent lent failed ({e}); nothing more from this sandbox is trusted",
                          kill=True, words=False)
            finally:
                spare.close()
            if ran is not None:
                break
        if ran is None:
            return None
        self._expect = True  # the agent asked for the next as it lent this one
        after = lent.oom_kills(self._oom_fd)
        return {"op": "result", "id": call_id,
                **procs.shell_answer(*ran, timeout, before is not None and after is not None and after > before)}

    def _ask(self, op: str, deadline: float, **kw) -> dict:
        """One round trip to the agent about the lent shell: its `lent` answer, by the call's
        deadline at the latest."""
        self._send({"op": op, **kw})
        deadline = min(deadline, time.monotonic() + lent.ASK_WITHIN)
        while True:
            msg = self._next(deadline)
            if msg.get("op") == "lent":
                return msg

    def _send(self, msg: dict) -> None:
        conn, proc = self._conn, self.proc  # close() of another thread may clear them meanwhile
        try:
            if conn is not None:
                conn.sendall(self._tx.frame(msg))  # a blocking socket: no timeout on a large call
            elif proc is not None:
                proc.write(self._tx.frame(msg))
            else:
                raise OSError("the sandbox was closed")
        except (BrokenPipeError, ConnectionResetError):
            if conn is not None and self.proc is not None:
                self._ended()  # the agent is gone: why, as when its channel ends (say, the engine stopped)
            self._die("could not write to the agent: it is gone")
        except (OSError, ExecutorError) as e:
            self._die(f"could not write to the agent: {e}")

    def _recv(self, timeout: float) -> tuple[str, bytes] | None:
        """The next piece of the agent's channel, as proc.read gives it: ("stdout", data),
        ("eof", b"") once the agent is gone or the sandbox was closed, None if nothing came in
        time. The socket stays blocking (sends have no time limit): the wait is a poll."""
        conn, poll, proc = self._conn, self._conn_poll, self.proc
        if conn is None:
            if proc is None:
                return ("eof", b"")
            return proc.read(timeout=timeout)
        try:
            if not poll.poll(timeout * 1000):
                return None
            if self._lending:  # a spare's descriptors come with its line
                data, ancillary, _, _ = conn.recvmsg(RECV_CHUNK, lent.ANC_SPACE, socket.MSG_CMSG_CLOEXEC)
                fds = lent.received(ancillary)
                if fds:
                    with self._lent_lock:
                        self._fds += fds if self._lending else []
                        extra = self._fds[lent.FDS:] if self._lending else fds  # (more than one
                        del self._fds[lent.FDS:]  # spare's at a time: never the agent's way)
                    lent.close_all(extra)
            else:
                data = conn.recv(RECV_CHUNK)
        except (OSError, ValueError):  # closed by another thread
            data = b""
        return ("stdout", data) if data else ("eof", b"")

    def _take_waiting(self) -> bool:
        """While a lent shell runs: what the agent sent meanwhile, without waiting, filed (its
        next spare's line, most often: the next call finds it held, where taking it, a poll,
        recvmsg, the MAC and the descriptors' checks, was on that call's path; other messages
        are dropped, as _next(spare=True) drops them, for no request is out). False once no more
        is wanted: enough held, or the channel ended (the call's end or the next call says so)."""
        self._file_read()  # first what an earlier read left (its descriptors wait in _fds for it)
        if len(self._spares) >= lent.HELD:
            return False
        item = self._recv(0)
        if item is not None:
            stream, data = item
            if stream == "eof":
                return False
            if stream == "stdout":
                self._lines.feed(data)
        self._file_read()
        return len(self._spares) < lent.HELD

    def _file_read(self) -> None:
        """The whole lines read and not yet opened: spares filed, the rest dropped."""
        while (msg := self._open_next()) is not None:
            if msg.get("op") == "spare":
                self._took(msg)

    def _open_next(self) -> "dict | None":
        """The next whole line read from the agent's channel, opened; None if there is none yet.
        A line that is not the agent's next authentic line, or longer than MAX_LINE, means
        something in the sandbox wrote to the channel: the sandbox is declared dead."""
        try:
            line = self._lines.pop()
            return None if line is None else self._rx.open(line)
        except wire.WireError as e:
            self._die(f"the agent's output channel was tampered with ({e}); a process in the sandbox "
                      "wrote to it, so nothing more from this sandbox is trusted", kill=True, words=False)

    def _next(self, deadline: float, spare: bool = False) -> "dict | None":
        """The next message from the agent's channel (stdout, or its socket), opened as
        _open_next opens it (a line not the agent's: SandboxDied, nothing of it trusted).
        A `spare` line is taken here, with its descriptors (runner/controller/lent_shells.py). spare: wait only
        for one, until the deadline (then None), other messages dropped."""
        while True:
            msg = self._open_next()
            if msg is not None:
                is_spare = msg.get("op") == "spare"
                if is_spare:
                    self._took(msg)
                if is_spare == spare:
                    return msg
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                if spare:
                    return None
                self._die("the agent did not answer in time", kill=True)
            item = self._recv(min(left, 1.0))
            if item is None:
                continue
            stream, data = item
            if stream == "eof":
                self._ended()
            elif stream == "stdout":
                self._lines.feed(data)
            else:
                self._stderr.append(data[-2000:])

    def _took(self, msg: dict) -> None:
        """A `spare` line: the shell it names, with the descriptors that came with it."""
        with self._lent_lock:
            fds, self._fds = self._fds[:lent.FDS], self._fds[lent.FDS:]
        spare = lent.Spare.of(msg, fds)  # (which closes the received descriptors)
        dropped = None
        with self._lent_lock:
            if spare is not None and not self._lending:  # closed meanwhile
                dropped, spare = spare, None
            if spare is not None:
                self._spares.append(spare)
                if len(self._spares) > lent.HELD:  # more than the agent's zygotes lend at once: not its way
                    dropped = self._spares.popleft()
        if dropped is not None:
            dropped.close()
        self._expect = True

    def _ended(self) -> None:
        """The agent's channel ended: raise SandboxDied with its exit status."""
        proc = self.proc
        try:
            if proc is None:
                raise RuntimeError("the sandbox was closed")
            code = proc.wait(timeout=2)
            why = f"exit status {code}" + (", out of memory" if code == OOM_EXIT and proc.oom_killed() else "")
        except Exception as e:  # the engine lost it too
            why = f"gone: {e}"
        if self._drainer is not None:  # its last words come on stdio, read by _drain until it ends
            self._drainer.join(timeout=2)
        self._die(f"the sandbox ended ({why})")

    def _die(self, why: str, kill: bool = False, words: bool = True) -> None:
        """Raise SandboxDied. words: quote the tail of the agent's stderr (which the processes in
        the sandbox can write too: left out when they are known to have tampered)."""
        tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-600:] if words else ""
        self.dead = why + (f"; its last words: {tail}" if tail else "")
        if kill and self.proc is not None:
            if self._drainer is None:  # its output is read no more: drained, so that an engine holding the kill
                # until the container's output is read (gVisor's shim behind a full queue: minutes) is not stalled
                self._drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True,
                                                 name="runner-sandbox-stderr")
                self._drainer.start()
            self.proc.kill()
        raise SandboxDied(self.dead)
