"""The options a host command may carry: an allowlist per known subcommand, never a deny list.

git and gh accept unique abbreviations of long options (`git push --exe=…` is `--exec=…`) and
read options anywhere before `--` (git permutes), so a list of what to refuse can never be
complete. Instead each supported subcommand lists the exact options it may carry, and how each
takes a value; anything else is refused. A program with no table here (an admin's own `make`)
gets no options at all after its allowed prefix, and `git`/`gh` only run the subcommands listed.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..errors import RunnerError

# Commands that must match a table entry below: both run programs or read host files through
# options or subcommands that no table lists (git -c/--exec/config, gh alias set --shell, …).
GUARDED = ("git", "gh")


@dataclass(frozen=True)
class Opt:
    """kind: flag (no value), value (`--o=v`, `--o v`, `-o v`, `-ov`), optional (`--o` or `--o=v`)."""
    kind: str
    values: frozenset[str] | None = None  # the only values allowed, if limited


@dataclass(frozen=True)
class Spec:
    options: dict[str, Opt] = field(default_factory=dict)


def _spec(*entries: str) -> Spec:
    """'--all' flag, '--repo=' value, '--porcelain[=]' optional value, '--rebase[=true|false]'
    optional from a set, '--state=open|closed' value from a set; '-u' / '-o=' the short forms."""
    out: dict[str, Opt] = {}
    for e in entries:
        for name in e.split():
            if name.endswith("]"):
                name, _, vals = name[:-1].partition("[=")
                out[name] = Opt("optional", frozenset(vals.split("|")) if vals else None)
            elif "=" in name:
                name, _, vals = name.partition("=")
                out[name] = Opt("value", frozenset(vals.split("|")) if vals else None)
            else:
                out[name] = Opt("flag")
    return Spec(out)


_NET = "-4 --ipv4 -6 --ipv6 -q --quiet -v --verbose --progress --no-progress"
_GH_REPO = "-R= --repo="

TABLE: dict[tuple[str, ...], Spec] = {
    # No --exec/--receive-pack/--upload-pack (a program), --recurse-submodules (git in hostile
    # submodules), --signed (the host's key), -c/--config, --repo (the remote is a positional),
    # --autostash (its apply runs status, which enters a submodule the pull brought in).
    ("git", "push"): _spec(_NET, "--all --branches --mirror --tags --follow-tags --no-follow-tags -n --dry-run",
                           "--porcelain -d --delete -f --force --force-with-lease[=] --no-force-with-lease",
                           "--force-if-includes --no-force-if-includes -u --set-upstream --prune --no-verify",
                           "--atomic --no-atomic -o= --push-option= --thin --no-thin"),
    ("git", "pull"): _spec(_NET, "-r --rebase[=true|false|merges] --no-rebase --ff --no-ff --ff-only",
                           "--commit --no-commit --no-edit --stat -n --no-stat --log --no-log",
                           "--no-autostash --all --tags --no-tags -p --prune --dry-run --set-upstream"),
    ("git", "fetch"): _spec(_NET, "--all --tags --no-tags -p --prune -P --prune-tags --dry-run -t"),
    ("git", "status"): _spec("-s --short -b --branch --porcelain[=v1|v2] --long -v --verbose -z",
                             "-u[=no|normal|all] --untracked-files[=no|normal|all] --ahead-behind --no-ahead-behind --show-stash",
                             "--no-renames"),
    # gh: no --web (a browser), --editor/-e (an editor), --body-file/-F (a host file), --jq/-t.
    ("gh", "pr", "list"): _spec(_GH_REPO, "-L= --limit= -s=open|closed|merged|all --state=open|closed|merged|all",
                                "-l= --label= -A= --author= -B= --base= -H= --head= -S= --search= -d --draft",
                                "--json="),
    ("gh", "pr", "view"): _spec(_GH_REPO, "-c --comments --json="),
    ("gh", "pr", "status"): _spec(_GH_REPO, "--json="),
    ("gh", "pr", "create"): _spec(_GH_REPO, "-t= --title= -b= --body= -B= --base= -H= --head= -d --draft",
                                  "-f --fill -l= --label= -r= --reviewer= -a= --assignee= --dry-run"),
    ("gh", "issue", "list"): _spec(_GH_REPO, "-L= --limit= -s=open|closed|all --state=open|closed|all",
                                   "-l= --label= -A= --author= -S= --search= --json="),
    ("gh", "issue", "view"): _spec(_GH_REPO, "-c --comments --json="),
    ("gh", "issue", "create"): _spec(_GH_REPO, "-t= --title= -b= --body= -l= --label= -a= --assignee="),
}


class OptionRefused(RunnerError, ValueError):
    """An argument is not an option this command may carry; str() says which and what is."""


def lookup(argv: list[str]) -> tuple[tuple[str, ...], Spec] | None:
    """The longest table entry argv starts with."""
    best = None
    for path, spec in TABLE.items():
        if tuple(argv[: len(path)]) == path and (best is None or len(path) > len(best[0])):
            best = (path, spec)
    return best


def supported(command: str) -> str:
    return ", ".join(" ".join(p) for p in TABLE if p[0] == command)


# Options whose values are handed on as words to a command that is run: gh's base and head
# branches go to `git log BASE...HEAD` and `git push`. (A title or body goes to the API as text,
# and may start with '-', as a list does.) Such a value must be a branch name as git would take
# one (`git check-ref-format --branch`, and a bit stricter): no option (a leading '-'), no path
# (a leading '/', '..', '//'), nothing git reads as a revision expression. A head may name its
# fork's owner, `OWNER:BRANCH`, as gh allows.
PLAIN_VALUES = frozenset({"-B", "--base", "-H", "--head"})
HEADS = frozenset({"-H", "--head"})
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
_NOT_IN_BRANCH = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|//|@\{|^[-/.]|[/.]$|/\.|\.lock$|\.lock/|^@$")


def _plain_value(name: str, value: str, label: str) -> None:
    """Such a value is a branch name (OWNER:BRANCH for a head), never an option or a path."""
    if name not in PLAIN_VALUES:
        return
    branch = value
    if name in HEADS and ":" in value:
        owner, _, branch = value.partition(":")
        if not _OWNER.match(owner):
            branch = value  # refused below, for its ':'
    if not branch or _NOT_IN_BRANCH.search(branch):
        raise OptionRefused(f"option {name} of {label}: {value!r} is not a branch name (no leading '-', '/' or '.', "
                            "no '..', '//', '@{', spaces or any of ~^:?*[\\; a head may be OWNER:BRANCH): "
                            f"the commands {label} runs would read it as an option, a path or a revision")


def check_options(args: list[str], spec: Spec, label: str) -> None:
    """Refuse any argument that is not an allowed option in an allowed form.

    Every word that starts with '-' (but '-' alone) is an option wherever it stands, because
    git and gh permute; a value-taking option consumes the next word as its value, which may not
    start with '-' either. After `--` no word may start with '-': git and gh hand words on to the
    commands they run (`git pull` runs `git fetch origin WORD…` with the `--` dropped)."""
    allowed = lambda: " ".join(sorted(spec.options)) or "none"  # noqa: E731
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            for rest in args[i:]:
                if rest.startswith("-") and rest != "-":
                    raise OptionRefused(f"{shlex.quote(rest)} after -- starts with '-': {label} hands such a word "
                                        "on to the commands it runs, as an option")
            return
        if a == "-" or not a.startswith("-"):
            continue
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            opt = spec.options.get(name)
            if opt is None:
                raise OptionRefused(f"option {name} is not allowed for {label} (exact names only, no "
                                    f"abbreviations; allowed: {allowed()})")
            if opt.kind == "flag" and eq:
                raise OptionRefused(f"option {name} of {label} takes no value")
            if opt.kind == "value" and not eq:
                if i >= len(args):
                    raise OptionRefused(f"option {name} of {label} needs a value")
                value, eq, i = args[i], "=", i + 1
            if eq and opt.values is not None and value not in opt.values:
                raise OptionRefused(f"option {name} of {label} allows only {', '.join(sorted(opt.values))}, "
                                    f"not {value!r}")
            if eq:
                _plain_value(name, value, label)
            continue
        chars = a[1:]
        for j, c in enumerate(chars):  # a bundle: -fu, or -oVALUE
            opt = spec.options.get("-" + c)
            if opt is None:
                raise OptionRefused(f"option -{c} (in {shlex.quote(a)}) is not allowed for {label} "
                                    f"(allowed: {allowed()})")
            if opt.kind != "flag" and chars[j + 1 : j + 2] == "=":
                # gh (pflag) reads -o=v as the value v, git as "=v": whichever this program is,
                # the value checked must be the value it runs with
                raise OptionRefused(f"option -{c} of {label}: give its value as -{c} VALUE or -{c}VALUE, not "
                                    f"-{c}=VALUE (programs differ on whether the '=' is part of the value)")
            if opt.kind == "optional":  # git's -uno: the rest of the word is the value, if any
                value = chars[j + 1 :]
                if value and opt.values is not None and value not in opt.values:
                    raise OptionRefused(f"option -{c} of {label} allows only {', '.join(sorted(opt.values))}, "
                                        f"not {value!r}")
                break
            if opt.kind == "value":
                value = chars[j + 1 :]
                if not value:
                    if i >= len(args):
                        raise OptionRefused(f"option -{c} of {label} needs a value")
                    value, i = args[i], i + 1
                if opt.values is not None and value not in opt.values:
                    raise OptionRefused(f"option -{c} of {label} allows only {', '.join(sorted(opt.values))}, "
                                        f"not {value!r}")
                _plain_value(f"-{c}", value, label)
                break
