"""`runner host-shell`: only the allowed argv ever runs, with exec, never through a shell."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runner.hostshell import Refused, check, parse_rules

RULES = parse_rules("git:push,git:pull,gh")
# A fake git stands for git: host-shell reads the repository's config with `git config`.
DELEGATE_CONFIG = '[ "$1" = config ] && exec /usr/bin/git "$@"\n'



@pytest.mark.parametrize("cmd, argv", [
    ("git push", ["git", "push"]),
    ("git push origin main", ["git", "push", "origin", "main"]),
    ("git pull --rebase", ["git", "pull", "--rebase"]),
    ("gh pr list --limit 5", ["gh", "pr", "list", "--limit", "5"]),
    ("gh issue create --title 'Fix (parens) and #1'", ["gh", "issue", "create", "--title", "Fix (parens) and #1"]),
])
def test_allowed_commands_give_their_argv(cmd, argv):
    assert check(cmd, RULES) == argv


@pytest.mark.parametrize("cmd, says", [
    ("git push; rm -rf ~", "not allowed"),  # argv[1] is "push;"
    ("git push origin; rm -rf ~", "shell characters"),
    ("git push && curl evil", "shell characters"),
    ("git push $(rm -rf ~)", "shell characters"),
    ("git push `id`", "shell characters"),
    ("git push\nrm -rf ~", "newline"),
    ("git push --upload-pack='touch /tmp/x'", "--upload-pack"),
    ("git pull --upload-pack=evil", "--upload-pack"),
    ("git push --receive-pack evil", "--receive-pack"),
    ("git -c core.sshCommand=evil push", "not allowed"),
    ("git fetch", "not allowed"),
    ("rm -rf ~", "not allowed"),
    ("/usr/bin/git push", "not allowed"),
    ("bash -c 'git push'", "not allowed"),
    ("git push 'unterminated", "does not parse"),
    ("", "no command"),
    (None, "no command"),
])
def test_hostile_commands_are_refused(cmd, says):
    with pytest.raises(Refused) as e:
        check(cmd, RULES)
    assert says in str(e.value)


def test_bad_allow_lists():
    for bad in ("", ",", "git::push", "/bin/sh"):
        with pytest.raises(ValueError):
            parse_rules(bad)


def _host_shell(original, allow, tmp_path):
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    if original is not None:
        env["SSH_ORIGINAL_COMMAND"] = original
    return subprocess.run([sys.executable, "-m", "runner", "host-shell", "--allow", allow], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_runs_with_exec_and_nothing_else(tmp_path):
    """A fake `git` on PATH records its argv; the injected part never runs."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # a person's command runs in the login directory
    log = tmp_path / "argv.log"
    fake = tmp_path / "git"
    fake.write_text(f"#!/bin/sh\n{DELEGATE_CONFIG}for a in \"$@\"; do printf '%s\\n' \"$a\" >> {log}; done\necho fake-git-ran\n")
    fake.chmod(0o755)
    marker = tmp_path / "pwned"
    p = _host_shell("git push origin 'my branch'", "git:push", tmp_path)
    assert p.returncode == 0 and p.stdout == "fake-git-ran\n"
    assert log.read_text().splitlines() == ["push", "origin", "my branch"]
    for hostile in (f"git push; touch {marker}", f"git push $(touch {marker})", f"git push `touch {marker}`",
                    f"git push\ntouch {marker}", f"git push --upload-pack='touch {marker}'"):
        p = _host_shell(hostile, "git:push", tmp_path)
        assert p.returncode == 126 and p.stderr.startswith("runner host-shell: refused"), p.stderr
    assert not marker.exists()
    assert log.read_text().splitlines() == ["push", "origin", "my branch"]  # git never ran again


def test_missing_command_and_no_command(tmp_path):
    p = _host_shell("no-such-tool-xyz list", "no-such-tool-xyz", tmp_path)
    assert p.returncode == 127 and "command not found" in p.stderr
    p = _host_shell(None, "git", tmp_path)
    assert p.returncode == 126 and "no command" in p.stderr
