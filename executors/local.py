"""The local backend: commands run as subprocesses of this process, in their own process group.

Not a sandbox: it gives the same interface without Docker (tests, development, the `local-dev`
policy). Limits are applied with setrlimit where they have a meaning for one process tree.
"""
from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
from pathlib import Path

from .base import MAX_GET_FILE, Executor, FailedProcess, Process, start_failure
from .errors import FileTooLarge, InvalidConfig
from .models import ExecRequest, Limits

BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")


class LocalProcess(Process):
    def __init__(self, popen: subprocess.Popen) -> None:
        super().__init__()
        self.popen = popen
        self._start_readers({
            "stdout": lambda: os.read(popen.stdout.fileno(), 65536),
            "stderr": lambda: os.read(popen.stderr.fileno(), 65536),
        })

    def write(self, data: bytes) -> None:
        self.popen.stdin.write(data)
        self.popen.stdin.flush()

    def close_stdin(self) -> None:
        try:
            self.popen.stdin.close()
        except (OSError, ValueError):
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return 128 - code if code < 0 else code  # killed by signal N -> 128+N, as a shell says

    def kill(self) -> None:
        """Kill the process's group and every process it started, those in sessions of their own
        included (the agent runs each call's shell in one): all stopped first, so none forks or
        is reparented away meanwhile, then killed."""
        tree = descendants(self.popen.pid)
        for pid in tree:
            _signal(pid, signal.SIGSTOP)
        tree += [p for p in descendants(self.popen.pid) if p not in tree]  # forked as they were stopped
        for pid in tree:
            _signal(pid, signal.SIGKILL)
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        for f in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass


def descendants(root: int) -> list[int]:
    """The processes below root (children, theirs, ...), from /proc; [] where there is none."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:
            continue
        fields = stat_line[stat_line.rfind(b")") + 2:].split()  # after the command's name, which may hold anything
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalExecutor(Executor):
    """Run commands on this machine. `workdir` is the default cwd; env starts from an allowlist."""

    name = "local"

    def __init__(self, workdir: str | os.PathLike | None = None, limits: Limits | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir).resolve() if workdir else Path.cwd()
        self.limits = limits or Limits()
        self.env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
        self.env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.env["HOME"] = os.environ.get("HOME", str(self.workdir))
        self.env.update(env or {})

    def spawn(self, req: ExecRequest) -> Process:
        if req.user is not None and not _is_me(req.user):
            raise InvalidConfig(f"the local executor runs every command as this process's user "
                                f"(uid {os.getuid()}); it cannot run one as {req.user!r}")
        cwd = self.workdir / req.cwd if req.cwd else self.workdir
        env = {**self.env, **req.env}
        try:
            popen = subprocess.Popen(
                req.argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=self._preexec(),
            )
        except (FileNotFoundError, NotADirectoryError):
            return FailedProcess(start_failure("not-found" if cwd.is_dir() else "no-cwd", req))
        except PermissionError:
            if not os.access(cwd, os.X_OK):
                return FailedProcess(start_failure("cwd-denied", req))
            exe = self._which(req.argv[0], cwd, env)
            return FailedProcess(start_failure("is-directory" if exe and os.path.isdir(exe) else "not-executable", req))
        return LocalProcess(popen)

    @staticmethod
    def _which(cmd: str, cwd: Path, env: dict[str, str]) -> str | None:
        if "/" in cmd:
            return str(cwd / cmd)
        for d in env.get("PATH", "").split(":"):
            if d and os.path.lexists(os.path.join(d, cmd)):
                return os.path.join(d, cmd)
        return None

    def _preexec(self):
        lim = self.limits
        if lim.memory is None:
            return None

        def apply() -> None:  # runs in the child between fork and exec
            resource.setrlimit(resource.RLIMIT_AS, (lim.memory, lim.memory))

        return apply

    # Files: this machine's, never through a symlink at the last component, never a file that is
    # not regular (a FIFO would block), reads bounded; errors are the builtin ones, naming the path.
    def put_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        p = self.workdir / path
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(20, "a parent of it is not a directory", str(p)) from None
        existed = os.path.lexists(p)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(22, "not a regular file", str(p))
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode is not None or not existed:
                os.fchmod(fd, 0o644 if mode is None else mode)
        finally:
            os.close(fd)

    def get_file(self, path: str, max_size: int | None = MAX_GET_FILE) -> bytes:
        p = self.workdir / path
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(21, "is a directory", str(p))
            if not stat.S_ISREG(st.st_mode):
                raise OSError(22, "not a regular file", str(p))
            if max_size is not None and st.st_size > max_size:
                raise FileTooLarge(str(p), max_size, st.st_size)
            want = st.st_size + 1 if max_size is None else max_size + 1
            chunks, got = [], 0
            while got < want and (chunk := os.read(fd, min(1 << 20, want - got))):
                chunks.append(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if max_size is not None and len(data) > max_size:
            raise FileTooLarge(str(p), max_size)
        return data


def _is_me(user: str) -> bool:
    """Whether `user` ("name", "uid", "name:group", "uid:gid") is this process's user and group."""
    import grp
    import pwd

    name, _, group = user.partition(":")
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = None
    if name not in (str(os.getuid()), me):
        return False
    if not group:
        return True
    try:
        my_group = grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        my_group = None
    return group in (str(os.getgid()), my_group)


EXECUTOR = LocalExecutor  # what executors.get_executor("local") builds
