"""Errors of the executor layer, each with a message a person can act on, and the root of every
error runner raises.

RunnerError is defined here, not in runner/, because the dependencies point one way (runner ->
executors) and executors must stay importable without runner; runner.errors re-exports it. So
`except RunnerError` catches everything runner raises on purpose, the executors' errors included,
and the CLI turns any of them into one line and its `exit_code`.
"""


class RunnerError(Exception):
    """Something runner could not do: exit 1 (or `exit_code`). The root of every error runner and its
    executors raise on purpose."""

    exit_code = 1


class ExecutorError(RunnerError):
    """Base of every executor error."""


class EngineUnavailable(ExecutorError):
    """The backend's engine (Docker daemon, SSH server) does not answer."""

    exit_code = 69  # the CLI's exit status for it: EX_UNAVAILABLE of sysexits.h


class ImageNotFound(ExecutorError):
    """The requested image is not on the engine; runner never pulls silently."""


class SandboxGone(ExecutorError):
    """The sandbox died or was removed while in use: it must be replaced. The controller raises
    it as runner.controller.sandbox.SandboxDied when the agent in the sandbox ends or stops
    answering (the same idea, seen one layer up)."""


class InvalidConfig(ExecutorError):
    """A configuration value is refused (bad mount, unsafe option without force, ...)."""


class FileTooLarge(ExecutorError):
    """get_file refused a file bigger than its max_size, without reading it whole."""

    def __init__(self, path: str, limit: int, size: int | None = None) -> None:
        self.path, self.limit, self.size = path, limit, size
        what = f"{size} bytes" if size is not None else "more bytes"
        super().__init__(f"{path}: {what} is over the limit of {limit} bytes; read it in parts (head, tail) or "
                         f"raise max_size")


class ExecCancelled(ExecutorError):
    """exec was cancelled by its caller; the command was killed."""


def file_error(code: str, path: str) -> OSError:
    """The builtin OSError subclass for an errno name reported from inside a sandbox, naming the path."""
    import errno

    kinds = {
        "ENOENT": (FileNotFoundError, "no such file or directory"),
        "EACCES": (PermissionError, "permission denied"),
        "EISDIR": (IsADirectoryError, "is a directory"),
        "ENOTDIR": (NotADirectoryError, "a parent of it is not a directory"),
        "EINVAL": (OSError, "not a regular file"),
    }
    cls, text = kinds.get(code, (OSError, f"failed ({code})"))
    return cls(getattr(errno, code, errno.EIO), text, path)
