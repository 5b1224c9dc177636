"""The command line's own parsing, engine-free: the listings, usage errors, every command's parser."""
from __future__ import annotations

import subprocess
import sys

import pytest

from runner.cli import COMMANDS, GROUPS

from .conftest import runner_cmd


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(runner_cmd(*args), capture_output=True, text=True, timeout=60)


def test_help_lists_every_command_and_group_and_exits_0():
    p = run("--help")
    names = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")}
    assert p.returncode == 0 and p.stderr == ""
    assert names == {name for group, name, _, _ in COMMANDS if group is None} | set(GROUPS)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_group_lists_its_commands(group):
    p = run(group, "--help")
    names = {line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")}
    assert p.returncode == 0 and names == {name for g, name, _, _ in COMMANDS if g == group}
    alone = run(group)  # no command: the same listing, on stderr, as a usage error
    assert alone.returncode == 2 and alone.stdout == "" and alone.stderr.strip() == p.stdout.strip()


def test_no_command_is_a_usage_error_with_the_listing():
    p = run()
    assert p.returncode == 2 and p.stdout == "" and "commands:" in p.stderr and "exec" in p.stderr


@pytest.mark.parametrize("args, says", [
    (["nope"], "runner: no command 'nope'"),
    (["images", "nope"], "runner images: no command 'nope'"),
    (["nope\x1b[2J"], "no command 'nope\\x1b[2J'"),  # what was typed comes back escaped
    (["call"], "the following arguments are required: tool"),
    (["audit", "tail", "-n", "many"], "argument -n: invalid int value: 'many'"),
    (["mcp", "--port", "x"], "argument --port: invalid int value: 'x'"),
    (["tools", "--workspac", "."], "unrecognized arguments: --workspac"),  # never abbreviated
    (["host-shell"], "the following arguments are required: --allow"),
])
def test_usage_errors_are_one_line_and_exit_2(args, says):
    p = run(*args)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert says in p.stderr and "\x1b" not in p.stderr, p.stderr


@pytest.mark.parametrize("group, name", [(g, n) for g, n, _, _ in COMMANDS])
def test_every_commands_parser_builds_and_shows_its_help(group, name):
    """Parsers are built only for the command that runs: a bad argument table shows here, not in use."""
    p = run(*([group] if group else []), name, "--help")
    assert p.returncode == 0 and p.stdout.startswith(f"usage: runner {f'{group} ' if group else ''}{name}"), p.stderr


def test_help_imports_nothing_but_the_command_table():
    code = ("import sys, runner.cli; sys.argv = ['runner', '--help']\ntry:\n runner.cli.main()\nexcept SystemExit: pass\n"
            "print(sorted(m for m in ('argparse', 'docker', 'pydantic', 'paramiko', 'executors', 'mcp', 'anyio', 'yaml')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().splitlines()[-1] == "[]"
