"""ah (seed 000, `lib/ah/tools.tl`): read, write, edit, bash. bash's timeout is in milliseconds.

Custom tools (executables with NAME.md, Lua records in tools/) are runner's custom tools already:
they keep their names. Output truncation (bash: 30,000 characters and 256 lines, head and tail)
is runner's own default (limits.output)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from .base import Dialect, DialectArgs, Tool, ms_to_s


class Read(DialectArgs):
    path: str = Field(description="file path")
    offset: Optional[int] = Field(None, ge=1, description="line number to start reading (1-indexed, text only)")
    limit: Optional[int] = Field(None, ge=1, description="max lines to read (text only)")


class Write(DialectArgs):
    path: str = Field(description="file path")
    content: str = Field(description="file content")


class Edit(DialectArgs):
    path: str = Field(description="file path")
    old_string: str = Field(description="text to find (must be unique in file)")
    new_string: str = Field(description="replacement text")


class Bash(DialectArgs):
    command: str = Field(description="shell command to execute")
    timeout: float = Field(120_000, gt=0, description="timeout in milliseconds (default 120000: 120 s)")


def pipefail(command: str) -> str:
    """ah runs `/bin/bash -o pipefail -ec COMMAND`: the same options, set first on the command's
    own first line (its line numbers in bash's messages stay the same)."""
    return "set -eo pipefail; " + command


DIALECT = Dialect(
    name="ah",
    seed="000_22272b18b1a2ac99.txt",
    tools=(
        Tool("read", "read", Read, "Reads a file and returns its contents. Supports text files and images (jpg, png, "
             "gif, webp, returned as base64 with media type)."),
        Tool("write", "write", Write, "Creates or overwrites a file with the given content. Creates parent "
             "directories as needed."),
        Tool("edit", "edit", Edit, "Finds and replaces text in a file. old_string must match exactly one location "
             "in the file (unique match requirement)."),
        Tool("bash", "bash", Bash, "Executes a shell command. Has a configurable timeout (default 120s). Returns "
             "stdout + stderr combined.", args={"command": ("command", pipefail), "timeout": ("timeout", ms_to_s)}),
    ),
    deviations=(
        "AH_PROTECT_DIRS is not read: protected directories come from the policy (protect, --protect, "
        "RUNNER_PROTECT_DIRS)",
        "read pages at 2000 lines / 50 KiB with a notice naming the next offset (ah cuts 50,000 characters head+tail)",
    ),
)
