"""Errors the CLI turns into one line on stderr and a non-zero exit, never a traceback."""


class UsageError(Exception):
    """Bad input from the person at the keyboard: exit 2."""

    exit_code = 2


class RunnerError(Exception):
    """Something runner could not do: exit 1 (or `exit_code`)."""

    exit_code = 1
