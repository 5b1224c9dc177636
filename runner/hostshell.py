"""`runner host-shell`: the forced command of an authorized_keys line on a host.

    restrict,command="runner host-shell --allow git:push,git:pull,gh" ssh-ed25519 AAAA... agent@runner

sshd puts what the client asked for in SSH_ORIGINAL_COMMAND. It is split with shlex (never a
shell), checked against the allowed commands and argument prefixes, and run with exec (never
eval): `git push; rm -rf ~` is the argv ["git", "push;", "rm", "-rf", "~"], which no prefix
`git push` allows, and no shell is ever there to read the `;`.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass

# Options that make git run a program of the caller's choosing, or change its configuration.
GIT_DANGEROUS = ("--upload-pack", "--receive-pack", "--exec", "-c", "--config", "--config-env", "--git-dir",
                 "--work-tree", "--namespace", "--super-prefix", "--exec-path", "--template")
# No shell ever reads the arguments, so these could do no harm; they are refused anyway, because
# an argument holding them was meant for a shell and cannot mean what its sender thought.
SHELL_CHARS = set(";&|`$<>\\")


class Refused(Exception):
    """The command is not allowed; str() says why (sent back to the client on stderr)."""


@dataclass(frozen=True)
class Rule:
    command: str
    prefix: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> "Rule":
        """'git' (any arguments) or 'git:push' / 'git:push:origin' (these first arguments)."""
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


def check(original: str | None, rules: list[Rule]) -> list[str]:
    """The argv to exec for SSH_ORIGINAL_COMMAND, or raise Refused."""
    if not original or not original.strip():
        raise Refused("no command given: this key only runs " + ", ".join(map(str, rules)))
    if "\n" in original or "\r" in original or "\x00" in original:
        raise Refused("refused: the command contains a newline or NUL")
    try:
        argv = shlex.split(original, posix=True)
    except ValueError as e:
        raise Refused(f"refused: the command does not parse ({e})") from None
    if not argv:
        raise Refused("no command given")
    matching = [r for r in rules if r.command == argv[0] and tuple(argv[1 : 1 + len(r.prefix)]) == r.prefix]
    if not matching:
        raise Refused(f"refused: {shlex.join(argv[:3])}{' …' if len(argv) > 3 else ''} is not allowed here; "
                      f"allowed: {', '.join(map(str, rules))}")
    for arg in argv[1:]:
        if SHELL_CHARS & set(arg):
            raise Refused(f"refused: argument {arg!r} contains shell characters; no shell runs here, so it "
                          "cannot mean what it seems to")
        if argv[0] == "git" and (arg in GIT_DANGEROUS or arg.split("=", 1)[0] in GIT_DANGEROUS):
            raise Refused(f"refused: git option {arg.split('=', 1)[0]} can run other programs or change git's "
                          "configuration")
    return argv


def main(allow: str) -> int:
    try:
        rules = parse_rules(allow)
    except ValueError as e:
        print(f"runner host-shell: {e}", file=sys.stderr)
        return 2
    try:
        argv = check(os.environ.get("SSH_ORIGINAL_COMMAND"), rules)
    except Refused as e:
        print(f"runner host-shell: {e}", file=sys.stderr)
        return 126
    path = shutil.which(argv[0])
    if path is None:
        print(f"runner host-shell: {argv[0]}: command not found on this host", file=sys.stderr)
        return 127
    sys.stdout.flush()
    os.execv(path, argv)  # replaces this process: no shell, no eval
    return 127  # not reached
