"""Host commands: a bash or exec call that is exactly an allowed command runs on the host over
SSH (with the host's credentials), in the host directory its sandbox directory maps to.

The command string is split with shlex and checked by the same rules as `runner host-shell`
(runner/hostshell.py): no shell operators, substitutions, redirections or newlines; git options
that run programs refused. Everything that does not name a host command stays in the sandbox.
"""
from __future__ import annotations

import posixpath
import shlex
from pathlib import Path

from .hostshell import Refused, Rule, check


def rules(policy) -> list[Rule]:
    return [Rule(h.name, tuple(h.args_prefix)) for h in policy.host_commands]


def wants_host(command: str, host_rules: list[Rule]) -> bool:
    """Does this command name a host command (its first word)? Then it is routed or refused."""
    try:
        first = shlex.split(command, posix=True)[:1]
    except ValueError:
        first = command.split()[:1]
    return bool(first) and any(first[0] == r.command for r in host_rules)


def route(command: str, host_rules: list[Rule]) -> list[str]:
    """The argv to run on the host, or Refused with why it is not routed."""
    for op in (";", "&", "|", "<", ">", "`", "$(", "${", "\n", "\r"):
        if op in command:
            shown = {"\n": "a newline", "\r": "a carriage return"}.get(op, repr(op))
            raise Refused(f"not run on the host: the command contains {shown}; a host command must be one plain "
                          "command (no shell operators, substitutions, redirections or newlines)")
    try:
        return check(command, host_rules)
    except Refused as e:
        raise Refused(f"not run on the host: {str(e).removeprefix('refused: ')}") from None


def host_dir(sandbox_cwd: str, sandbox_ws: str, host_ws: Path) -> str:
    """The host directory a sandbox directory maps to through the workspace mount."""
    cwd = posixpath.normpath(posixpath.join(sandbox_ws, sandbox_cwd or "."))
    if cwd != sandbox_ws and not cwd.startswith(sandbox_ws.rstrip("/") + "/"):
        raise Refused(f"not run on the host: the working directory {cwd} is outside the workspace, which is the "
                      "only place that maps to a host directory")
    return str(host_ws / posixpath.relpath(cwd, sandbox_ws))
