"""Host commands: a bash or exec call that is exactly an allowed command runs on the host over
SSH (with the host's credentials), in the host directory its sandbox directory maps to.

The command string is split with shlex and checked by the same rules as `runner host-shell`
(runner/host/shell.py): no shell operators, substitutions, redirections or newlines; only the
options each subcommand allows. Everything that does not name a host command stays in the sandbox.

What goes over SSH is always a host-shell request (argv, cwd, timeout): to a forced-command
host it is the whole command line; to any other host it is handed to `runner host-shell` there.
Either way the host resolves the directory and checks the repository (runner/host/repo.py),
because only the host sees what the sandbox made of the workspace.
"""
from __future__ import annotations

import posixpath
import shlex
from pathlib import Path

from .shell import CommandRefused, Request, Rule, check, rules_spec


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
    """The argv to run on the host, or CommandRefused with why it is not routed."""
    for op in (";", "&", "|", "<", ">", "`", "$(", "${", "\n", "\r"):
        if op in command:
            shown = {"\n": "a newline", "\r": "a carriage return"}.get(op, repr(op))
            raise CommandRefused(f"not run on the host: the command contains {shown}; a host command must be one plain "
                          "command (no shell operators, substitutions, redirections or newlines)")
    try:
        return check(command, host_rules)
    except CommandRefused as e:
        raise CommandRefused(f"not run on the host: {str(e).removeprefix('refused: ')}") from None


def host_dir(sandbox_cwd: str, sandbox_ws: str, host_ws: Path) -> str:
    """The host directory a sandbox directory maps to through the workspace mount: a lexical
    mapping that refuses what plainly leaves the workspace; the host resolves it (hostrepo.Place),
    because only there can symlinks the sandbox made be seen."""
    cwd = posixpath.normpath(posixpath.join(sandbox_ws, sandbox_cwd or "."))
    if cwd != sandbox_ws and not cwd.startswith(sandbox_ws.rstrip("/") + "/"):
        raise CommandRefused(f"not run on the host: the working directory {cwd} is outside the workspace, which is the "
                      "only place that maps to a host directory")
    return str(host_ws / posixpath.relpath(cwd, sandbox_ws))


def invocation(argv: list[str], cwd: str, timeout: float | None, host_rules: list[Rule], host, root: str) -> list[str]:
    """The argv the SSH executor sends: the request itself to a forced-command host, else
    `runner host-shell --allow … --root ROOT --command REQUEST` run there."""
    request = Request(argv, cwd, timeout)
    if host.forced_command:
        return request.words()
    try:
        allow = rules_spec(host_rules)
    except ValueError as e:
        raise CommandRefused(f"not run on the host: {e}") from None
    try:
        runner = shlex.split(host.runner)
    except ValueError as e:
        raise CommandRefused(f"not run on the host: the policy's host.runner does not parse ({e})") from None
    return [*runner, "host-shell", "--allow", allow, "--root", root, "--command", request.line()]
