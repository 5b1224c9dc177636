"""The executor layer's defaults, exit codes and size grammar: standard library only, so a path
that must start fast (`runner exec`, executors/docker/oneshot.py) has them without pydantic.
executors.models builds its pydantic models on these."""
from __future__ import annotations

import re

DEFAULT_IMAGE = "runner/base:latest"  # the sandbox image runner builds (runner images build); never pulled
# The hardened limits of a sandbox: {field of executors.models.Limits: value}.
DEFAULT_LIMIT_VALUES = {"memory": 512 * 1024**2, "cpus": 1.0, "pids": 256, "tmpfs": 64 * 1024**2}

TIMEOUT_EXIT = 124  # a command killed at its timeout, with everything it started
OOM_EXIT = 137  # a command killed by the kernel's OOM killer (or SIGKILL: 128 + 9)
NOT_FOUND_EXIT = 127
NOT_STARTED_EXIT = 126

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'512m' -> 536870912. Accepts b, k, m, g, t (binary units), with optional 'b'/'ib'."""
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"size must be positive, got {text}")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"bad size {text!r}: use a number with an optional unit, like 512m or 2g")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def start_failure_message(reason: str, cmd: str, cwd: str | None, user: str | None) -> str:
    """runner's line for a command that never started (executors.models.StartReason)."""
    text = {
        "not-found": f"{cmd}: command not found in the sandbox (no such file, or not on its PATH)",
        "not-executable": f"{cmd}: permission denied: not an executable file",
        "is-directory": f"{cmd}: is a directory, not a command",
        "no-cwd": f"working directory {cwd}: no such directory in the sandbox",
        "cwd-denied": f"working directory {cwd}: permission denied",
        "unknown-user": f"user {user}: no such user in the sandbox (not in its /etc/passwd)",
        "unknown-group": f"user {user}: no such group in the sandbox (not in its /etc/group)",
    }[reason]
    return f"runner: {text}; the command did not start"
