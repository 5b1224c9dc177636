"""`runner exec`: one command in a fresh, hardened container, removed afterwards."""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

from executors.defaults import OOM_EXIT, TIMEOUT_EXIT

from ..backends.docker_engine import build_config, parse_env, plain_config  # noqa: F401  (serve's exec, the tests)
from ..backends.docker_engine import qualify as _qualify  # noqa: F401  (serve's images)
from ..errors import UsageError


@dataclass
class ExecOptions:
    cmd: list[str]
    image: str | None = None  # None: executors.models.DEFAULT_IMAGE
    timeout: float | None = None
    memory: str | None = None
    cpus: float | None = None
    pids: int | None = None
    network: str = "none"
    mounts: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    workdir: str | None = None
    user: str | None = None
    runtime: str | None = None
    host: str | None = None
    force_unsafe_mounts: bool = False
    stop_timeout: float = 10.0
    interactive: bool = False  # -i: stdin copied in even when it is a terminal
    tty: bool = False  # -t: a terminal in the container
    entrypoint: str | None = None  # "" clears the image's
    tmpfs: list[str] = field(default_factory=list)  # PATH[:OPTS]
    shm_size: str | None = None
    gpus: str | None = None
    publish: list[str] = field(default_factory=list)  # [IP:]HOSTPORT:CONTAINERPORT[/tcp]
    detach: bool = False  # -d: runner/cli/detached.py
    name: str | None = None
    rm: bool = False  # with -d: removed when it ends
    ttl: float | None = None  # with -d: seconds until `runner gc` may remove it


def run(o: ExecOptions) -> int:
    """Run the command; return its exit status (124 on timeout, 137 on OOM)."""
    from ..backends.docker_engine import local_engine

    if o.detach:
        from .detached import start

        return start(o, plain_config(o))
    if o.name is not None or o.ttl is not None:
        raise UsageError("--name and --ttl are for detached runs (-d)")
    engine = local_engine(o.host)
    try:
        code, timed_out, oom = _run_local(o, engine) if engine is not None else _run_sdk(o)
    except Exception as e:
        if o.gpus and "could not select device driver" in str(e):
            from ..errors import RunnerError

            raise RunnerError(f"--gpus {o.gpus}: this Docker engine has no GPU runtime (install the NVIDIA Container "
                              "Toolkit and register it with dockerd, then restart it); the command did not start") from None
        raise
    if timed_out:
        print(f"runner: timed out after {o.timeout:g}s: killed the command and all its processes", file=sys.stderr)
        return TIMEOUT_EXIT
    if oom:
        limit = o.memory or "the default 512m"
        print(f"runner: out of memory: the memory limit ({limit}) killed the command", file=sys.stderr)
        return OOM_EXIT
    return code


def _on_output(stream: str, data: bytes) -> None:
    f = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
    f.write(data)
    f.flush()


# The line the container's init (tini) writes when it cannot exec the command, then exits 127
# (no such file) or 126 (any other error).
_TINI_FAILED = re.compile(rb"^\[FATAL tini \(\d+\)\] exec (.*) failed: (.*)\n?$", re.S)


class StartGate:
    """Passes the output on, but for the init's line when the command could not be run: output
    that begins as that line does is held (up to its line's end, which may come in pieces) until
    the exit status says whether the command started (126, 127: runner's own line replaces it)
    or printed it itself (it is passed on)."""

    PREFIX = b"[FATAL tini ("
    MOST = 4096  # bytes held at most: a longer line is no init's

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd
        self.gating = True
        self.held: tuple[str, bytes] | None = None

    def output(self, stream: str, data: bytes) -> None:
        if not self.gating:
            self._flush()  # a held line that was not the init's goes first
            _on_output(stream, data)
            return
        if self.held is not None and self.held[0] != stream:
            self._flush()
            _on_output(stream, data)
            return
        buf = (self.held[1] if self.held else b"") + data
        self.held = (stream, buf)
        if len(buf) > self.MOST or not (buf.startswith(self.PREFIX) or self.PREFIX.startswith(buf)):
            self._flush()
        elif b"\n" in buf:
            self.gating = False
            if not _TINI_FAILED.match(buf):
                self._flush()

    def _flush(self) -> None:
        self.gating = False
        if self.held is not None:
            stream, data = self.held
            self.held = None
            _on_output(stream, data)

    def close(self, code: int) -> int:
        """The exit status; runner's line on stderr instead of the init's held one."""
        from executors.defaults import NOT_FOUND_EXIT, NOT_STARTED_EXIT, start_failure_message

        if self.held is None:
            return code
        stream, data = self.held
        if code not in (NOT_FOUND_EXIT, NOT_STARTED_EXIT) or not _TINI_FAILED.match(data):
            self._flush()
            return code
        self.held = None
        why = _TINI_FAILED.match(data).group(2).decode(errors="replace").strip()
        reason = {"No such file or directory": "not-found", "Permission denied": "not-executable"}.get(why)
        line = (start_failure_message(reason, self.cmd, None, None) if reason
                else f"runner: {self.cmd}: cannot run it ({why}); the command did not start")
        from ..untrusted.printable import printable

        sys.stderr.write(printable(line) + "\n")
        sys.stderr.flush()
        return code


def _run_local(o: ExecOptions, engine) -> tuple[int, bool, bool]:
    """The local engine, over its unix socket with the standard library (runner/backends/docker_engine.py):
    no docker-py, no pydantic, one round trip per step."""
    from ..backends.docker_engine import published, run_once
    from .interrupts import relayed

    cfg = plain_config(o)
    stdin = _stdin() if o.interactive or not _is_terminal(0) else None  # docker reads a terminal with -i only
    if o.tty and o.interactive and not _is_terminal(0):
        raise UsageError("-it: stdin is not a terminal (drop -t to pipe data in)")
    gate = StartGate(_shown(o))
    # Until the command runs, SIGINT, SIGTERM, SIGHUP raise in here (runner/cli/interrupts.py): the
    # container is removed on the way out. While it runs they, QUIT, USR1, USR2 and WINCH are
    # passed on to it (as `docker run` does), and it is killed --stop-timeout seconds after one
    # that asks it to end.
    with relayed() as relay, published(engine, cfg, o.publish) as on_start, \
            raw_terminal(0 if o.tty and o.interactive else None):
        res = run_once(engine, cfg, o.cmd, stdin=stdin, on_output=gate.output, timeout=o.timeout,
                          relay=relay, stop_timeout=o.stop_timeout, tty=terminal_size if o.tty else None,
                          on_start=on_start)
    return gate.close(res.exit_code), res.timed_out, res.oom_killed


def _run_sdk(o: ExecOptions) -> tuple[int, bool, bool]:
    """An engine reached over tcp:// or ssh://: the Docker SDK's DockerExecutor."""
    from executors.models import ExecRequest

    from ..backends.docker import DockerBackend

    if o.tty or (o.publish and o.network == "none"):
        raise UsageError("-t/--tty and -p without --network bridge: only with a local engine (unix socket), "
                         "not over tcp:// or ssh://")
    cfg = build_config(o)
    gate = StartGate(_shown(o))
    # SIGINT, SIGTERM, SIGHUP raise in there (runner/cli/interrupts.py, installed by the CLI)
    res = DockerBackend.one_shot(cfg, lambda: ExecRequest(argv=o.cmd, timeout=o.timeout), base_url=o.host,
                                 stdin=_stdin(), on_output=gate.output)
    return gate.close(res.exit_code), res.timed_out, res.oom_killed


def _shown(o: ExecOptions) -> str:
    """The command as runner's messages name it."""
    return o.entrypoint or (o.cmd[0] if o.cmd else "the image's command")


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def terminal_size() -> "tuple[int, int] | None":
    """(rows, columns) of the caller's terminal (stdin's, else stdout's); None without one."""
    for fd in (0, 1):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        return size.lines, size.columns
    return None


@contextmanager
def raw_terminal(fd: "int | None"):
    """The terminal at fd in raw mode within the block (keys go to the container's terminal as
    they are typed: Ctrl-C, Ctrl-D, Ctrl-Z included), its settings restored on every way out.
    fd None, or no terminal: nothing changes."""
    import termios
    import tty

    if fd is None or not _is_terminal(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _stdin():
    """fd 0 as an unbuffered file (or None without one). Never sys.stdin.buffer: the thread that
    copies stdin in is still blocked in a read when the command ends, and a BufferedReader's lock
    held at interpreter shutdown aborts the process (`Fatal Python error: _enter_buffered_busy`,
    exit 134, the command's status lost). A raw read holds no lock."""
    try:
        os.fstat(0)
    except OSError:
        return None
    return open(0, "rb", buffering=0, closefd=False)

