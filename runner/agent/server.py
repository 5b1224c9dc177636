"""The agent's loop: JSON lines in on stdin, JSON lines out on stdout (or both on the controller's
socket, runner/controller/channel.py, when the hello names one), one call at a time."""
from __future__ import annotations

import importlib
import json
import os
import select
import sys
import threading

from . import wire
from .context import Ctx, ToolError

# tool -> (module, function). A module is imported when a call first needs it, or by warm_up()
# after the hello: the agent answers the hello (so a session is ready) without loading them all.
TOOLS = {
    "read": ("files", "read"), "write": ("files", "write"), "edit": ("files", "edit"),
    "apply_patch": ("patch", "apply_patch"), "ls": ("listing", "ls"), "read_dir": ("listing", "read_dir"),
    "glob": ("listing", "glob"), "find": ("listing", "find"), "grep": ("listing", "grep"),
    "bash": ("procs", "bash"), "exec": ("procs", "exec_"), "process": ("procs", "process"),
    "http_fetch": ("net", "http_fetch"), "web_fetch": ("net", "http_fetch"), "web_search": ("net", "web_search"),
    "git_status": ("gitops", "git_status"), "git_diff": ("gitops", "git_diff"), "git_log": ("gitops", "git_log"),
    "git_add": ("gitops", "git_add"), "git_commit": ("gitops", "git_commit"), "git_push": ("gitops", "git_push"),
    "git_pull": ("gitops", "git_pull"), "echo": ("small", "echo"), "get_time": ("small", "get_time"),
    "memory_search": ("small", "memory_search"), "memory_get": ("small", "memory_get"),
    "custom_describe": ("custom", "describe"), "custom_run": ("custom", "run"),  # custom tools: the controller's ops
}
# What warm_up() loads. Not net: its imports (urllib.request, http.client, the email package) took
# 27-35 ms of a sandbox's CPU, more than all the others together, in every session just as its
# first calls came; a fetch loads it, and waits on the network anyway.
MODULES = ("procs", "small", "files", "listing", "patch", "gitops", "plugins", "custom")


_loaded: dict = {}  # name -> module, once its import has finished (import_module cost ~10 us a call)


def tool_module(name: str):
    mod = _loaded.get(name)
    if mod is None:  # import_module waits for an import that warm_up() has under way
        mod = _loaded[name] = importlib.import_module(f"{__package__}.{name}")
    return mod


def tool_function(tool: str):
    where = TOOLS.get(tool)
    return None if where is None else getattr(tool_module(where[0]), where[1])


def warm_up(modules=MODULES) -> None:
    """Import tool modules in the background, so the first calls find them loaded."""
    def load() -> None:
        for name in modules:
            try:
                tool_module(name)
            except Exception:  # noqa: S110 - the call that needs it reports the error
                pass

    threading.Thread(target=load, name="runner-agent-warm-up", daemon=True).start()


STREAMING = {"bash", "exec"}
READ_CHUNK = 64 * 1024


def _spare_ready() -> list:
    """What the agent's loop watches between requests, (fd, handler) pairs: the zygotes' pipes
    while a spare asked for has not said it runs (procs.pending, lender.pending), once loaded."""
    procs, lender = _loaded.get("procs"), _loaded.get("lender")
    got = [] if lender is None else lender.pending()
    mine = None if procs is None else procs.pending()
    return got if mine is None else [mine, *got]


def _fits(body: bytes) -> bool:
    return len(body) + wire.MAC_HEX + 2 <= wire.MAX_LINE


def _bounded(body: bytes, msg: dict) -> bytes:
    """body, or an error result in its place when its line would pass the channel's bound."""
    if _fits(body):
        return body
    return wire.encode({"op": "result", "id": msg.get("id"), "is_error": True, "meta": {},
                    "content": f"the result is {len(body)} bytes, over the channel's bound of {wire.MAX_LINE}: "
                               "ask for less (a page, a smaller file)"})


class Wire:
    """The protocol's ends in this process (private descriptors, see claim_stdio); lines framed
    by wire.Signer/Verifier once the hello gave the key."""

    def __init__(self, inp, out_fd: int) -> None:
        self.inp = inp  # held open; read through its descriptor (a stream without one: read1)
        try:
            fd = inp.fileno()
        except (AttributeError, OSError, ValueError):
            self._reading(None, inp.read1)
        else:
            self._reading(fd, lambda n: os.read(fd, n))
        self.write = os.fdopen(out_fd, "wb", buffering=0).write
        self.sock = None  # the controller's socket, once connect() moved the protocol there
        self.lock = threading.Lock()
        self.held: "dict | None" = None  # a call's last output, which rides in its result
        self.signer: wire.Signer | None = None
        self.verifier: wire.Verifier | None = None

    def keyed(self, key_hex: str) -> None:
        key = bytes.fromhex(key_hex)
        self.signer = wire.Signer(wire.direction_key(key, wire.FROM_AGENT))
        self.verifier = wire.Verifier(wire.direction_key(key, wire.TO_AGENT))

    def connect(self, path: str) -> None:
        """Move the protocol to the controller's socket (runner/controller/channel.py); OSError if it cannot
        be reached. The socket is not inherited by anything this process starts."""
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        self.inp = sock
        self._reading(sock.fileno(), sock.recv)
        self.write = sock.sendall
        self.sock = sock

    def lend(self, msg: dict, fds) -> None:
        """Send msg with the descriptors fds (SCM_RIGHTS, on the socket only: OSError on stdio),
        as one line of the channel: the controller takes them with that line."""
        import array
        import socket

        if self.sock is None:
            raise OSError("descriptors go only over the controller's socket")
        with self.lock:
            line = self.signer.frame_body(_bounded(wire.encode(msg), msg))
            sent = self.sock.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            if sent < len(line):  # (a line this short goes whole; the rest would go without the descriptors)
                self.sock.sendall(line[sent:])

    def _reading(self, fd: "int | None", read) -> None:
        self.fd, self.read = fd, read
        self.buf = bytearray()  # what was read and is not a line yet
        self.scanned = 0  # how much of buf holds no newline

    def send(self, msg: dict) -> None:
        with self.lock:
            held, self.held = self.held, None
            if held is not None and msg.get("op") == "result" and msg.get("id") == held.get("id"):
                merged = wire.encode({**msg, "output": held["data"]})  # one message: one line to open
                if _fits(merged):
                    self.write(self.signer.frame_body(merged))
                    return
            first = self.signer.frame(held) if held is not None else b""  # (at most ~CHUNK)
            self.write(first + self.signer.frame_body(_bounded(wire.encode(msg), msg)))

    def hold(self, msg: dict) -> None:
        """Keep a call's last output (an `output` message) for its result, which carries it as
        `output`: the controller opens one line, not two."""
        with self.lock:
            self.held = msg

    def _line(self, watch) -> bytes:
        """The next line, its newline kept. Without one: the first MAX_LINE + 1 bytes of a line
        over the bound, or what the input's end left (b"" if nothing)."""
        while True:
            i = self.buf.find(b"\n", self.scanned)
            if 0 <= i <= wire.MAX_LINE:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                self.scanned = 0
                return line
            if i > wire.MAX_LINE or len(self.buf) > wire.MAX_LINE:
                return bytes(self.buf[:wire.MAX_LINE + 1])
            self.scanned = len(self.buf)
            if watch is not None and self.fd is not None:
                self._idle(watch)
            data = self.read(READ_CHUNK)
            if not data:
                line = bytes(self.buf)
                self.buf.clear()
                self.scanned = 0
                return line
            self.buf += data

    def _idle(self, watch) -> None:
        """Until the input can be read, hand what else watch() names ((fd, handler) pairs) to
        its handler: the spare shells' ready lines (_spare_ready), taken while the controller
        writes the next call."""
        while True:
            got = watch()
            if not got:
                return
            p = select.poll()
            p.register(self.fd, select.POLLIN)
            for fd, _ in got:
                p.register(fd, select.POLLIN)
            ready = {f for f, _ in p.poll()}
            for fd, handle in got:
                if fd in ready:
                    handle()
            if self.fd in ready:
                return

    def receive(self, watch=None) -> dict | None:
        """The next request; None at the end of input. wire.WireError if it cannot be trusted.
        watch: () -> (fd, handler) or None, served while no request has come."""
        while True:
            line = self._line(watch)
            if not line:
                return None
            if not line.endswith(b"\n"):
                if len(line) > wire.MAX_LINE:
                    raise wire.WireError(f"a request line of more than {wire.MAX_LINE} bytes")
                return None  # the input ended inside a line
            line = line[:-1]
            if self.verifier is not None:
                return self.verifier.open(line)
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise wire.WireError(f"the hello is not JSON: {type(e).__name__}") from None
            if not isinstance(msg, dict) or msg.get("op") != "hello" or not isinstance(msg.get("key"), str):
                raise wire.WireError("the first line must be the hello with the channel's key")
            return msg


def answer(call_id, value) -> dict:
    if isinstance(value, dict) and "content" in value:
        return {"op": "result", "id": call_id, "content": value["content"], "is_error": bool(value.get("is_error")),
                "meta": value.get("meta") or {}}
    return {"op": "result", "id": call_id, "content": value, "is_error": False, "meta": {}}


def handle_call(ctx: Ctx, msg: dict) -> dict:
    call_id, tool, args = msg.get("id"), msg.get("tool"), msg.get("args")
    fn = tool_function(tool) if isinstance(tool, str) else None
    if fn is None:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"unknown tool: {tool}. Tools here: {', '.join(sorted(TOOLS))}"}
    if not isinstance(args, dict):
        return {"op": "result", "id": call_id, "is_error": True, "meta": {}, "content": "args must be a JSON object"}
    try:
        value = fn(ctx, args, call_id) if tool in STREAMING else fn(ctx, args)
        return answer(call_id, value)
    except ToolError as e:
        return {"op": "result", "id": call_id, "content": str(e), "is_error": True,
                "meta": {"error_type": e.error_type} if e.error_type else {}}
    except KeyError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"missing argument {e.args[0]} for {tool}"}
    except PermissionError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"{tool}: permission denied: {e.filename or e}"}
    except OSError as e:
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"{tool}: {e.strerror or e}{': ' + str(e.filename) if e.filename else ''}"}
    except Exception as e:  # a bug in a tool must not end the agent
        import traceback

        traceback.print_exc()
        return {"op": "result", "id": call_id, "is_error": True, "meta": {},
                "content": f"internal error in {tool}: {type(e).__name__}: {e}"}


def _let_go_of_ignored_signals() -> None:
    """Signals ignored where the agent was started stay ignored in every program it starts: a
    controller run as a job of a script ignores SIGINT and SIGQUIT, under nohup SIGHUP, and each
    call's shell (the local executor's) started with them, as a `bash -c` from a clean parent does
    not. Python's own (SIGPIPE, SIGXFSZ) its subprocess restores."""
    import signal

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ):
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def main(inp=None, out_fd: int | None = None) -> None:
    """Serve one controller on this process's stdin/stdout (or the given channel)."""
    _let_go_of_ignored_signals()
    if inp is None or out_fd is None:
        inp, out_fd = claim_stdio()
    channel = Wire(inp, out_fd)
    ctx = None
    single = False  # a per-call sandbox: one call, then shutdown
    try:
        while True:
            try:
                msg = channel.receive(_spare_ready)
            except wire.WireError as e:
                print(f"runner agent: stopping, its input cannot be trusted: {e}", file=sys.stderr, flush=True)
                return
            if msg is None:
                break
            op = msg.get("op")
            if op == "hello" and ctx is None:
                try:
                    channel.keyed(msg["key"])
                except ValueError:
                    print("runner agent: stopping, the hello's key is not hex", file=sys.stderr, flush=True)
                    return
                ctx = Ctx(msg)
                ctx.send = channel.send
                ctx.hold = channel.hold
                try:
                    os.chdir(ctx.workspace)
                except OSError:
                    pass
                reply = {"op": "hello", "ok": True, "pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
                         "tools": sorted(TOOLS)}
                path = msg.get("channel")
                if isinstance(path, str) and path:
                    try:
                        channel.connect(path)
                        reply["channel"] = "socket"
                    except OSError as e:  # the controller reads this answer on stdio then
                        reply["channel"] = f"stdio: cannot reach {path}: {e.strerror or e}"
                channel.send(reply)
                # One call only: the shell tools (most calls) are loaded ahead, any other module
                # when its call comes; loading them all cost ~40 ms of CPU in every sandbox.
                single = msg.get("single_call") is True
                tool_module("procs").prepare(ctx, early=not single)
                warm_up(("procs",) if single else MODULES)
            elif op == "call":
                channel.send(handle_call(ctx, msg))
                if not single:
                    tool_module("procs").prepare(ctx)  # the next call's shell, made while the controller reads this
                else:
                    tool_module("procs").retire()  # its zygote: no call comes after this one
            elif op == "lend" and ctx is not None and not single and channel.sock is not None:
                # Its shells serve the bash calls from now on: the agent's own zygote (the hello
                # started it) is started again only after a call the agent runs itself.
                tool_module("procs").retire()
                tool_module("lender").start(ctx, channel.lend)
            elif op == "lent_status":
                wait = msg.get("wait")  # None: until the zygote tells (Forked.wait)
                code = tool_module("lender").status(msg.get("pid"), float(wait) if isinstance(wait, (int, float)) else None)
                channel.send({"op": "lent", "status": code})
            elif op == "lent_kill":
                tool_module("lender").kill(msg.get("pid"))
                channel.send({"op": "lent", "status": None})
            elif op == "shutdown":
                break
            else:
                channel.send({"op": "error", "error": f"unknown op {op!r}"})
    finally:
        for name in ("procs", "lender", "plugins"):  # only those loaded can have started anything
            # one that warm_up() is still importing has no shutdown yet, and has started nothing
            shutdown = getattr(sys.modules.get(f"{__package__}.{name}"), "shutdown", None)
            if shutdown is not None:
                shutdown()


def claim_stdio():
    """(input stream, output fd) of the protocol, and no other way to it from this sandbox's
    processes: the agent becomes non-dumpable (PR_SET_DUMPABLE 0: a same-uid process can then
    neither open its /proc/PID/fd/*, nor read its memory, nor ptrace it); the channel moves to
    private, non-inheritable copies of fds 0 and 1; fds 0, 1 and 2 then point at /dev/null, so a
    child that names no stdio of its own holds nothing of it. Messages of this process go to a
    private copy of stderr. (In a container, pid 1 is the bootstrap's reaper of orphans, which
    forked this process before anything was loaded: runner/controller/bundle.py, INIT.) gVisor lets a
    same-uid process open /proc/PID/fd/* all the same: there wire.py's MACs are what hold."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError, ImportError):
        pass
    fds = [os.dup(f) for f in (0, 1, 2)]  # os.dup: non-inheritable
    null = os.open(os.devnull, os.O_RDWR)
    for f in (0, 1, 2):
        os.dup2(null, f)
    os.close(null)
    sys.stdout = sys.stderr = os.fdopen(fds[2], "w", buffering=1, encoding="utf-8", errors="replace")
    return os.fdopen(fds[0], "rb"), fds[1]
