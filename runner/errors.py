"""The controller's errors, and the error_type contract of tool results.

Every error runner raises on purpose is a RunnerError, the executors' errors included (the CLI turns it into one line on stderr
and its `exit_code`, never a traceback); UsageError is the person's mistake (exit 2). A tool's
failure is never raised: it is a ToolResult with is_error and `meta.error_type`, one of
ErrorType (documented in the README as a contract).
"""
from __future__ import annotations

from enum import StrEnum

from executors.errors import RunnerError  # the root, there so that executors need nothing of runner


__all__ = ["ErrorType", "RunnerError", "UsageError"]


class UsageError(RunnerError):
    """Bad input from the person at the keyboard: exit 2."""

    exit_code = 2


class ErrorType(StrEnum):
    """`meta.error_type` of a tool result with is_error (a contract: scripts branch on it)."""

    GATED = "gated"  # the policy refused the call: gate, rate limit, approval, protected path, quota, host rule
    VALIDATION = "validation"  # the call is malformed: unknown tool, bad or oversized arguments, bad path
    EXECUTION = "execution"  # the tool ran (or its sandbox did) and failed; the message says how
    TIMEOUT = "timeout"  # the tool ran past its timeout and was killed with everything it started
