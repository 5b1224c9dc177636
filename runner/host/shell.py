"""`runner host-shell`: the forced command of an authorized_keys line on a host.

    restrict,command="runner host-shell --allow git:push,git:pull --root /srv/work" ssh-ed25519 AAAA... agent@runner

sshd puts what the client asked for in SSH_ORIGINAL_COMMAND. Two forms are understood:

- a person's command line (`ssh host git push origin main`): split with shlex (never a shell),
  shell characters refused, run in the login directory;
- a runner request, `runner-host/1 '{"argv": [...], "cwd": "/srv/work/repo", "timeout": 60}'`
  (what a Runner's host_commands send): the argv exactly, in cwd, which must resolve inside
  --root with no symlink on the way; killed when the timeout has passed (and the client gone).

Either way the argv must start with an allowed command and prefix and carry only options that
subcommand allows (runner/host/options.py), git is pinned to the checked repository and refuses
what its configuration would run (runner/host/repo.py), and nothing is ever eval'ed.
"""
from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from ..errors import RunnerError

REQUEST = "runner-host/1"
MAX_REQUEST = 64 * 1024
# After its timeout a request's command gets this long for the client's own kill to arrive
# before host-shell kills it itself (the client reports the timeout; this is the backstop).
KILL_BACKSTOP = 5.0
# No shell ever reads the arguments, so these could do no harm; they are refused in a typed
# command line anyway, because an argument holding them was meant for a shell.
SHELL_CHARS = set(";&|`$<>\\")


class CommandRefused(RunnerError):
    """The command is not allowed; str() says why (sent back to the client on stderr)."""


@dataclass(frozen=True)
class Rule:
    command: str
    prefix: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> "Rule":
        """'git' (the subcommands runner knows) or 'git:push' / 'git:push:origin' (these first arguments)."""
        parts = [p for p in spec.strip().split(":")]
        if not parts[0] or any(not p for p in parts) or "/" in parts[0]:
            raise ValueError(f"bad --allow entry {spec!r}: use NAME or NAME:ARG[:ARG...]")
        return cls(parts[0], tuple(parts[1:]))

    def __str__(self) -> str:
        return " ".join((self.command, *self.prefix))


def parse_rules(allow: str) -> list[Rule]:
    rules = [Rule.parse(s) for s in allow.split(",") if s.strip()]
    if not rules:
        raise ValueError("--allow names no command")
    return rules


def rules_spec(rules: list[Rule]) -> str:
    """The --allow text that parses back to these rules."""
    for r in rules:
        for w in (r.command, *r.prefix):
            if not w or "," in w or ":" in w or "/" in r.command:
                raise ValueError(f"host command {str(r)!r} cannot be written as an --allow entry (a word is empty "
                                 "or holds ',' or ':')")
    return ",".join(":".join((r.command, *r.prefix)) for r in rules)


def _matching(argv: list[str], rules: list[Rule]) -> list[Rule]:
    matching = [r for r in rules if r.command == argv[0] and tuple(argv[1 : 1 + len(r.prefix)]) == r.prefix]
    if not matching:
        raise CommandRefused(f"refused: {shlex.join(argv[:3])}{' …' if len(argv) > 3 else ''} is not allowed here; "
                      f"allowed: {', '.join(map(str, rules))}")
    return matching


def check_argv(argv: list[str], rules: list[Rule]) -> list[str]:
    """argv if an allowed rule matches it and every option is one its subcommand allows."""
    from .options import GUARDED, OptionRefused, check_options, lookup, supported

    if not argv or not argv[0]:
        raise CommandRefused("no command given")
    for arg in argv:
        if any(ord(c) < 32 or ord(c) == 127 for c in arg):
            raise CommandRefused("refused: the command contains a newline or another control character")
    matching = _matching(argv, rules)
    found = lookup(argv)
    try:
        if found is not None:
            path, spec = found
            check_options(argv[len(path):], spec, " ".join(path))
        elif argv[0] in GUARDED:
            raise CommandRefused(f"refused: {shlex.join(argv[:3])}{' …' if len(argv) > 3 else ''}: only these "
                          f"{argv[0]} subcommands run as host commands, without options before them: "
                          f"{supported(argv[0])}")
        else:
            start = 1 + max(len(r.prefix) for r in matching)
            for arg in argv[start:]:
                if arg == "--":
                    break
                if arg.startswith("-") and arg != "-":
                    raise CommandRefused(f"refused: option {arg.split('=', 1)[0]}: {argv[0]} takes no options after "
                                  f"{' '.join((argv[0], *matching[0].prefix))} as a host command")
    except OptionRefused as e:
        raise CommandRefused(f"refused: {e}") from None
    return list(argv)


def check(original: str | None, rules: list[Rule]) -> list[str]:
    """The argv to exec for a typed command line (a person's `ssh host git push`), or CommandRefused."""
    if not original or not original.strip():
        raise CommandRefused("no command given: this key only runs " + ", ".join(map(str, rules)))
    if "\n" in original or "\r" in original or "\x00" in original:
        raise CommandRefused("refused: the command contains a newline or NUL")
    try:
        argv = shlex.split(original, posix=True)
    except ValueError as e:
        raise CommandRefused(f"refused: the command does not parse ({e})") from None
    if not argv:
        raise CommandRefused("no command given")
    _matching(argv, rules)  # an unlisted command is "not allowed", whatever it holds
    for arg in argv[1:]:
        if SHELL_CHARS & set(arg):
            raise CommandRefused(f"refused: argument {arg!r} contains shell characters; no shell runs here, so it "
                          "cannot mean what it seems to")
    return check_argv(argv, rules)


@dataclass(frozen=True)
class Request:
    argv: list[str]
    cwd: str | None = None
    timeout: float | None = None

    def words(self) -> list[str]:
        body = {"argv": self.argv, "cwd": self.cwd, "timeout": self.timeout}
        return [REQUEST, json.dumps(body, separators=(",", ":"))]

    def line(self) -> str:
        """The one line a client sends (what sshd puts in SSH_ORIGINAL_COMMAND)."""
        return shlex.join(self.words())


def parse_request(line: str | None, rules: list[Rule]) -> Request:
    """A runner request or a typed command line, checked against the rules."""
    if line and line.startswith("runner-host/"):
        if len(line) > MAX_REQUEST:
            raise CommandRefused(f"refused: the request is longer than {MAX_REQUEST} bytes")
        try:
            words = shlex.split(line, posix=True)
        except ValueError as e:
            raise CommandRefused(f"refused: the request does not parse ({e})") from None
        if words[0] != REQUEST:
            raise CommandRefused(f"refused: this host-shell speaks {REQUEST}, not {words[0]}: use the same runner version "
                          "on both sides")
        try:
            body = json.loads(words[1]) if len(words) == 2 else None
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict) or set(body) - {"argv", "cwd", "timeout"}:
            raise CommandRefused(f"refused: a {REQUEST} request is one JSON object with argv, cwd and timeout")
        argv, cwd, timeout = body.get("argv"), body.get("cwd"), body.get("timeout")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise CommandRefused("refused: the request's argv is not a non-empty list of strings")
        if cwd is not None and not isinstance(cwd, str):
            raise CommandRefused("refused: the request's cwd is not a string")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not 0 < timeout < 10**7):
            raise CommandRefused("refused: the request's timeout is not a positive number of seconds")
        return Request(check_argv(argv, rules), cwd, None if timeout is None else float(timeout))
    return Request(check(line, rules))


def supervise(path: str, argv: list[str], env: dict[str, str], timeout: float | None) -> int:
    """Run the command as a child (its own process group) and kill that group when the client
    hangs up or the timeout and the backstop have passed; its status the way a shell gives it."""
    proc = subprocess.Popen(argv, executable=path, env=env, process_group=0)
    deadline = float("inf") if timeout is None else time.monotonic() + timeout + KILL_BACKSTOP
    hangup = select.poll()
    hangup.register(sys.stdout.fileno(), 0)  # POLLHUP and POLLERR are always reported
    while True:
        try:
            code = proc.wait(timeout=0.2)
            return 128 - code if code < 0 else code
        except subprocess.TimeoutExpired:
            pass
        gone = any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in hangup.poll(0))
        if gone or time.monotonic() >= deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            if not gone:
                print(f"runner host-shell: timed out after {timeout:g}s: the command was killed", file=sys.stderr)
            return 124


def main(allow: str, root: str | None = None, command: str | None = None) -> int:
    from . import repo as hostrepo

    try:
        rules = parse_rules(allow)
    except ValueError as e:
        print(f"runner host-shell: {e}", file=sys.stderr)
        return 2
    line = command if command is not None else os.environ.get("SSH_ORIGINAL_COMMAND")
    place = None
    try:
        req = parse_request(line, rules)
        if req.cwd is not None and root is None:
            raise CommandRefused("refused: this host-shell has no --root, so it runs no request with a working directory; "
                          "add --root DIR (the workspaces' directory) to its command")
        if req.cwd is None:  # a person's command line: in the login directory, wherever --root is
            place = hostrepo.Place(os.getcwd(), os.getcwd())
        else:
            place = hostrepo.Place(req.cwd, root)
        repo = place.repository(min(req.timeout, hostrepo.CHECK_WITHIN) if req.timeout else hostrepo.CHECK_WITHIN)
        if repo is None and req.argv[0] == "git":
            raise CommandRefused(f"refused: {place.path} is not in a git repository inside {place.root}")
    except (CommandRefused, hostrepo.Unsafe) as e:
        if place is not None:
            place.close()
        msg = str(e) if isinstance(e, CommandRefused) else f"refused: {e}"
        print(f"runner host-shell: {msg}", file=sys.stderr)
        return 126
    path = shutil.which(req.argv[0])
    if path is None:
        place.close()
        print(f"runner host-shell: {req.argv[0]}: command not found on this host", file=sys.stderr)
        return 127
    env = hostrepo.environment(dict(os.environ), repo)
    os.fchdir(place.fd)  # the directory that was checked, whatever its path names now
    place.close()
    sys.stdout.flush()
    if req.cwd is None:  # a person's command line: their session, their terminal
        os.execve(path, req.argv, env)  # replaces this process: no shell, no eval
    return supervise(path, req.argv, env, req.timeout)
