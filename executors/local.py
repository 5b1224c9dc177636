"""The local backend: commands run as subprocesses of this process, in their own process group.

Not a sandbox: it gives the same interface without Docker (tests, development, the `local-dev`
policy). Limits are applied with setrlimit where they have a meaning for one process tree.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

from .base import Executor, Process
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


class FailedProcess(Process):
    """A command that could not start (not found, not executable): exit 127/126 like a shell."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__()
        self.code = code
        self._push("stderr", message.encode() + b"\n")
        self._push("eof", b"")

    def write(self, data: bytes) -> None:
        raise BrokenPipeError("command did not start")

    def close_stdin(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int | None:
        return self.code

    def kill(self) -> None:
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
        cwd = self.workdir / req.cwd if req.cwd else self.workdir
        env = {**self.env, **req.env}
        try:
            popen = subprocess.Popen(
                req.argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=self._preexec(),
            )
        except FileNotFoundError as e:
            if not cwd.is_dir():
                return FailedProcess(126, f"runner: cwd {cwd}: no such directory")
            return FailedProcess(127, f"runner: {req.argv[0]}: command not found ({e.strerror})")
        except PermissionError as e:
            return FailedProcess(126, f"runner: {req.argv[0]}: permission denied ({e.strerror})")
        return LocalProcess(popen)

    def _preexec(self):
        lim = self.limits
        if lim.memory is None:
            return None

        def apply() -> None:  # runs in the child between fork and exec
            resource.setrlimit(resource.RLIMIT_AS, (lim.memory, lim.memory))

        return apply

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        p = self.workdir / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)

    def get_file(self, path: str) -> bytes:
        return (self.workdir / path).read_bytes()
