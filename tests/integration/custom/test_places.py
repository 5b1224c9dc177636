"""Places and precedence (system < user < policy < project), shadowing, refresh_tools, CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import install, script

EXE = "#!/bin/sh\necho '%s'\n"


def exe(dest: Path, name: str, says: str) -> None:
    script(dest, name, EXE % says)
    (dest / f"{name}.md").write_text(f"---\ndescription: says {says}\n---\nguidance from {says}\n")


def test_a_later_place_wins_by_name(make_runner, workspace, tmp_path):
    user = Path.home() / ".config" / "runner" / "tools"
    folder = tmp_path / "team-tools"
    exe(user, "who", "user")
    exe(user, "only_user", "user")
    exe(folder, "who", "policy")
    exe(folder, "only_policy", "policy")
    r = make_runner(**{"tools.folders": [str(folder)]})
    tools = {s.name: s for s in r.tools()}
    assert "who" in tools, r.custom_errors()  # once in CI neither 'who' was found: say why, should it recur
    assert tools["who"].source == "policy" and tools["only_user"].source == "user"
    assert r.call("who", {}).content.strip() == "policy"
    exe(workspace / ".runner" / "tools", "who", "project")
    r2 = make_runner(**{"tools.folders": [str(folder)]})
    assert r2.call("who", {}).content.strip() == "project"
    assert {s.name: s.source for s in r2.tools()}["only_policy"] == "policy"


def test_a_custom_tool_never_silently_shadows_a_builtin(make_runner, workspace):
    exe(workspace / "tools", "read", "custom read")
    (workspace / "a.txt").write_text("real\n")
    r = make_runner()
    assert [s.source for s in r.tools() if s.name == "read"] == ["builtin"]
    assert any("name of a built-in" in e["error"] and "allow_shadowing" in e["error"] for e in r.custom_errors())
    assert "real" in r.call("read", {"path": "a.txt"}).content
    r2 = make_runner(**{"tools.allow_shadowing": True})
    assert [s.source for s in r2.tools() if s.name == "read"] == ["project"]
    assert r2.call("read", {"args": ""}).content.strip() == "custom read"


def test_denied_custom_tools_are_not_offered_nor_run(make_runner, workspace):
    install(workspace / "tools", "executable/stamp")
    r = make_runner(**{"tools.deny": ["stamp"]})
    assert "stamp" not in {s.name for s in r.tools()}
    res = r.call("stamp", {"args": "a"})
    assert res.is_error and "denied" in res.content


def test_refresh_tools_reports_what_changed(make_runner, workspace):
    tools = workspace / "tools"
    exe(tools, "one", "1")
    exe(tools, "two", "2")
    r = make_runner(**{"tools.allow": ["refresh_tools"]})
    assert {"one", "two"} <= {s.name for s in r.tools()}
    (tools / "two").unlink()
    (tools / "two.md").unlink()
    (tools / "one.md").write_text("---\ndescription: says one, now\n---\n")
    exe(tools, "three", "3")
    ch = r.refresh_tools()
    assert (ch["added"], ch["removed"], ch["changed"]) == (["three"], ["two"], ["one"])
    res = r.call("refresh_tools", {})
    assert "three" in res.content and "no change" in res.content
    assert r.call("three", {}).content.strip() == "3"


def test_project_tool_folders_are_protected(make_runner, workspace):
    install(workspace / "tools", "executable/stamp")
    r = make_runner(**{"tools.preset": "all"})
    res = r.call("write", {"path": "tools/stamp", "content": "#!/bin/sh\necho pwned\n"})
    assert res.is_error and "protected" in res.content
    assert "pwned" not in r.call("stamp", {"args": "x"}).content


def test_a_tools_folder_of_project_code_stays_writable(make_runner, workspace):
    """`tools/` is protected only when it holds a tool: many projects keep code there. Bash in
    the sandbox can write it too (no read-only mount), and nothing in it is loaded."""
    (workspace / "tools").mkdir()
    (workspace / "tools" / "helpers.py").write_text("X = 1\n")
    (workspace / "tools" / "README.md").write_text("project helpers\n")
    (workspace / ".runner" / "tools").mkdir(parents=True)  # always a tool folder: protected
    r = make_runner(**{"tools.preset": "all"})
    assert not r.call("write", {"path": "tools/helpers.py", "content": "X = 2\n"}).is_error
    assert not r.call("bash", {"command": "echo Y = 3 >> tools/helpers.py"}).is_error
    assert (workspace / "tools" / "helpers.py").read_text() == "X = 2\nY = 3\n"
    res = r.call("write", {"path": ".runner/tools/new.sh", "content": "#!/bin/sh\n"})
    assert res.is_error and "protected" in res.content
    assert [s for s in r.tools() if s.source == "project"] == []


def test_per_call_lifecycle(make_runner, workspace):
    install(workspace / "tools", "executable/stamp")
    r = make_runner(**{"sandbox.lifecycle": "per-call", "sandbox.pool_size": 0})
    assert "stamp" in {s.name for s in r.tools()}
    assert r.call("stamp", {"args": "q"}).content == "1: q\n"


@pytest.mark.usefixtures("no_leaks")
def test_cli_tools_shows_source_guidance_and_skips(workspace, home):
    install(workspace / "tools", "executable/wordcount", "executable/wordcount.md")
    script(workspace / ".runner" / "tools", "bad.sh", '#!/bin/sh\n[ "$TOOL_ACTION" = describe ] && echo nope\n')
    base = [sys.executable, "-m", "runner", "tools", "--workspace", str(workspace)]
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(base, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if line.startswith("wordcount"))
    assert row.split()[1] == "project"
    assert "skipped custom tool" in p.stderr and "bad.sh" in p.stderr
    p = subprocess.run(base + ["--prompt", "--executor", "local"], capture_output=True, text=True, timeout=300, env=env)
    assert "## wordcount\nCount lines, words and characters of files\nPass file names" in p.stdout
    p = subprocess.run(base + ["--format", "openai"], capture_output=True, text=True, timeout=300, env=env)
    fn = {t["function"]["name"]: t["function"] for t in json.loads(p.stdout)}
    assert fn["wordcount"]["parameters"]["properties"]["args"]["type"] == "string"
