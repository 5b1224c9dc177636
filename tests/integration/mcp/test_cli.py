"""`runner mcp` refuses bad options before it serves anything (no protocol on stdout)."""
from __future__ import annotations

import subprocess

from .conftest import runner_argv


def test_bad_options_fail_with_a_message_and_nothing_on_stdout(tmp_path, env):
    for args, code, words in [
        (["--workspace", str(tmp_path / "nope")], 1, "is not a directory"),
        (["--policy", "no-such-policy"], 2, "no-such-policy"),
        (["--http", "--idle-timeout", "0"], 2, "--idle-timeout must be a positive"),
        (["--http", "--max-sessions", "0"], 2, "--max-sessions must be at least 1"),
    ]:
        p = subprocess.run(runner_argv("mcp", *args), env=env, cwd=tmp_path, capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=120)
        assert (p.returncode, p.stdout) == (code, b""), (args, p.returncode, p.stderr)
        assert words in p.stderr.decode(), (args, p.stderr)
