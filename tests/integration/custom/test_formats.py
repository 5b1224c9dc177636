"""Each format loads, describes itself in the sandbox and runs there, on local and docker."""
from __future__ import annotations

import json

from .conftest import PLUGIN, install


def custom(r) -> dict:
    return {s.name: s for s in r.tools() if s.source != "builtin"}


def test_executable_with_markdown_and_with_help(make_runner, workspace):
    install(workspace / "tools", "executable/wordcount", "executable/wordcount.md", "executable/stamp")
    (workspace / "a.txt").write_text("one two\nthree\n")
    r = make_runner()
    tools = custom(r)
    wc, stamp = tools["wordcount"], tools["stamp"]
    assert (wc.source, wc.kind) == ("project", "exe")
    assert wc.description == "Count lines, words and characters of files"
    assert "relative to the workspace" in wc.guidance
    assert stamp.description == "Print the arguments, one per line, with their numbers"  # first line of --help
    assert wc.schema()["properties"]["args"]["type"] == "string"
    res = r.call("wordcount", {"args": "a.txt"})
    assert not res.is_error and res.content.split() == ["2", "3", "14", "a.txt"]
    res = r.call("stamp", {"args": "a 'b c' $HOME;rm"})  # shlex words, never a shell
    assert res.content.splitlines() == ["1: a", "2: b c", "3: $HOME;rm"]
    res = r.call("wordcount", {})
    assert res.is_error and "give one or more file names" in res.content and "exit code: 2" in res.content


def test_describe_execute_scripts_json_and_text(make_runner, workspace):
    install(workspace / ".acai" / "tools", "describe-execute/greet.py")
    install(workspace / ".runner" / "tools", "describe-execute/repeat.sh")
    r = make_runner()
    tools = custom(r)
    greet, repeat = tools["greet"], tools["repeat"]
    assert (greet.kind, repeat.kind) == ("script", "script")
    assert greet.needs_approval is False and repeat.needs_approval is False
    assert greet.schema()["required"] == ["who"]
    assert repeat.schema()["properties"]["char"]["default"] == "x"
    assert repeat.schema()["required"] == ["count"]
    res = r.call("greet", {"who": "ann", "times": 2, "shout": True})
    assert not res.is_error and res.content == '{"greeting":"HELLO ANN HELLO ANN"}'  # compact JSON, re-encoded
    assert r.call("repeat", {"count": 5}).content == "xxxxx"


def test_script_result_rules(make_runner, workspace):
    from .conftest import script

    d = workspace / ".runner" / "tools"
    head = ('#!/bin/sh\nif [ "$TOOL_ACTION" = describe ]; then echo \'{"name": "%s", "description": "d", '
            '"parameters": [], "needsApproval": false}\'; exit 0; fi\n')
    script(d, "quiet", head % "quiet" + "echo 'only on stderr' >&2\n")
    script(d, "fails", head % "fails" + "echo broken; exit 4\n")
    script(d, "spaces", head % "spaces" + "printf '\\n\\n  padded  \\n\\n'\n")
    r = make_runner()
    assert r.call("quiet", {}).content == "only on stderr"  # stderr when stdout is empty
    res = r.call("fails", {})
    assert res.is_error and res.content == "broken\nexit code: 4"
    assert r.call("spaces", {}).content == "padded"


def test_json_lines_plugin(make_runner, workspace):
    r = make_runner(**{"tools.plugins": [{"path": str(PLUGIN)}]})
    note = custom(r)["note"]
    assert (note.source, note.kind) == ("policy", "plugin")
    assert note.schema()["properties"]["mode"]["enum"] == ["ok", "die", "hang"]
    first = r.call("note", {"text": "a"})
    second = r.call("note", {"text": "b"})
    assert first.content.startswith("note #1 ") and second.content.startswith("note #2 ")  # one process, kept


def test_tools_export_and_prompt_include_guidance(make_runner, workspace):
    from runner.tools.schemas import formats

    install(workspace / "tools", "executable/wordcount", "executable/wordcount.md")
    r = make_runner()
    specs = r.tools()
    table = formats.export(specs, "table")
    assert any(line.split()[:2] == ["wordcount", "project"] for line in table.splitlines())
    exported = {t["name"]: t for t in json.loads(formats.export(specs, "json"))}
    assert exported["wordcount"]["source"] == "project" and "relative to the workspace" in exported["wordcount"]["guidance"]
    assert "## wordcount\nCount lines" in formats.prompt(specs)
