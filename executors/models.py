"""Pydantic models at the executor edge: limits, requests and results."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .defaults import (DEFAULT_IMAGE, DEFAULT_LIMIT_VALUES, NOT_FOUND_EXIT, NOT_STARTED_EXIT, OOM_EXIT,  # noqa: F401
                       TIMEOUT_EXIT, parse_size)


class Limits(BaseModel):
    """Resource limits of a sandbox. None means the backend's default (see DEFAULT_LIMITS)."""

    model_config = ConfigDict(extra="forbid")

    memory: int | None = Field(default=None, description="bytes; memory+swap are set equal")
    cpus: float | None = Field(default=None, gt=0, description="CPU share, 1.0 = one core")
    pids: int | None = Field(default=None, gt=0, description="largest number of processes")
    tmpfs: int | None = Field(default=None, description="size of the /tmp tmpfs in bytes")

    @field_validator("memory", "tmpfs", mode="before")
    @classmethod
    def _size(cls, v):
        return None if v is None else parse_size(v)


DEFAULT_LIMITS = Limits(**DEFAULT_LIMIT_VALUES)


class ExecRequest(BaseModel):
    """One command to run: an argv, never a shell string (wrap it in sh -c yourself)."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    stdin: bytes | None = None
    timeout: float | None = Field(default=None, gt=0, description="seconds; None = no limit")
    user: str | None = None
    max_output: int | None = Field(default=None, gt=0, description="bytes kept per stream; past it the command is "
                                   "killed and the result says output_limited")
    own_init: bool = Field(default=False, description="the command reaps orphans itself: where it is a "
                           "fresh container's main process (docker per-call), it runs as pid 1 with no "
                           "docker-init in front of it (which would share its stdio)")

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, v: list[str]) -> list[str]:
        for a in v:
            if "\x00" in a:
                raise ValueError("argv must not contain NUL bytes")
        if not v[0]:
            raise ValueError("argv[0] must not be empty")
        return v


StartReason = Literal["not-found", "not-executable", "is-directory", "no-cwd", "cwd-denied", "unknown-user",
                      "unknown-group"]


class StartFailure(BaseModel):
    """Why a command never started: told apart from a command that ran and exited 126/127."""

    reason: StartReason
    message: str

    @property
    def exit_code(self) -> int:
        return NOT_FOUND_EXIT if self.reason == "not-found" else NOT_STARTED_EXIT


class ExecResult(BaseModel):
    """What a command did. stdout/stderr are empty when the output was streamed to a callback."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    oom_killed: bool = False
    output_limited: bool = Field(default=False, description="a stream passed the request's max_output: the "
                                 "command was killed and the output kept is its first max_output bytes")
    start_failure: StartFailure | None = Field(default=None, description="set when the command never started; "
                                               "exit_code is then 127 (not found) or 126, stderr runner's message")
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0
