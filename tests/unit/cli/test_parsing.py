"""The command line's own parsing, engine-free: the listings, usage errors, every command's parser."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner.cli import COMMANDS, GROUPS

from ...integration.cli.conftest import runner_cmd


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


def test_options_may_come_before_the_arguments(tmp_path):
    """`runner call TOOL --opt V ARGS`: argparse's plain parse refused the JSON after an option."""
    p = run("call", "echo", "--executor", "local", "--workspace", str(tmp_path), '{"text": "hi"}')
    assert p.returncode == 1 and json.loads(p.stdout)["meta"]["error_type"] == "gated", p.stderr  # parsed, then refused


def test_images_build_takes_force_and_no_force():
    from runner.cli import parser

    build = parser(*next(c for c in COMMANDS if c[:2] == ("images", "build")))
    assert build.parse_args(["--force"]).force and not build.parse_args(["--no-force"]).force
    assert not build.parse_args([]).force


def test_a_closed_stdout_ends_quietly():
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(runner_cmd("policy", "show"), stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 1 and p.stderr == "", p.stderr


def test_an_interrupt_before_a_command_runs_is_one_line_and_exit_130(monkeypatch, capsys):
    from runner import cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "dispatch", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.main(["tools"])
    assert e.value.code == 130 and capsys.readouterr().err == "runner: interrupted\n"


def test_what_is_printed_has_no_control_characters(tmp_path):
    """A path, a name or a policy's text may hold any character: stdout never carries a raw one."""
    import shutil

    from runner.policy.loader import find_policy

    hostile = tmp_path / "a\x1b[2Jb\x07.yaml"
    shutil.copy(find_policy("default"), hostile)
    for args in (["policy", "check", str(hostile)], ["policy", "show", str(hostile)]):
        p = run(*args)
        assert p.returncode == 0 and "\\x1b[2J" in p.stdout, (args, p.stdout, p.stderr)
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout, args


def test_the_cli_gives_a_runtime_fallback_in_one_line_and_every_other_warning_as_before(capsys):
    """main() shows runtimes.RuntimeFallback as its other notices and hands any other warning to
    the showwarning it found, which is back in place when main() returns."""
    import warnings

    from executors.docker.runtimes import RuntimeFallback
    from runner import cli

    seen = []
    show = cli._warn_with(lambda message, category, *rest: seen.append((str(message), category)))
    show(RuntimeFallback("crun could not start a sandbox"), RuntimeFallback, "f.py", 1)
    show(UserWarning("something else"), UserWarning, "f.py", 2)
    assert capsys.readouterr().err == "runner: warning: crun could not start a sandbox\n"
    assert seen == [("something else", UserWarning)]
    before = warnings.showwarning
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert warnings.showwarning is before
