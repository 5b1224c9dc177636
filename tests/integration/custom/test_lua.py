"""ah's Lua tool records, through lupa in the sandbox (runner/base has lupa; local uses the
extra runner[lua]), on local and docker."""
from __future__ import annotations

import json
import shutil

import pytest

from .conftest import EXAMPLES, script

pytest.importorskip("lupa", reason="the optional extra runner[lua] is not installed")


def lua_tool(dest, name: str, text: str):
    return script(dest, name, text, mode=0o644)


def test_lua_record_describes_and_runs(make_runner, workspace):
    shutil.copytree(EXAMPLES / "lua", workspace / "tools")
    (workspace / "notes.txt").write_text("apple pie\nbanana\napple tart\n")
    r = make_runner()
    spec = next(s for s in r.tools() if s.name == "line_count")
    assert (spec.kind, spec.source) == ("lua", "project")
    assert spec.description == "Count the lines of a file, or the lines that contain a word"
    assert "instead of bash" in spec.guidance
    assert spec.schema()["required"] == ["path"]
    res = r.call("line_count", {"path": "notes.txt", "word": "apple"})
    assert not res.is_error, res.content
    assert json.loads(res.content) == {"lines": 3, "matching": 2, "path": "notes.txt"}  # a table: JSON
    res = r.call("line_count", {"path": "missing.txt"})  # (result, true) from execute: a tool error
    assert res.is_error and res.content.startswith("cannot open missing.txt")
    res = r.call("line_count", {"path": 7})
    assert res.is_error and "path" in res.content  # validated before any Lua runs


def test_lua_failures_are_reported_and_skipped(make_runner, workspace):
    d = workspace / "tools"
    lua_tool(d, "syntax.lua", "return { name = 'syntax', \n")
    lua_tool(d, "noexec.lua", "return { name = 'noexec', description = 'd', input_schema = {} }\n")
    lua_tool(d, "notable.lua", "return 42\n")
    lua_tool(d, "spin.lua", "while true do end\n")
    lua_tool(d, "boom.lua", "return { name = 'boom', description = 'raises', input_schema = {type = 'object'},\n"
                            "  execute = function(input) error('kaput') end }\n")
    lua_tool(d, "ask.lua", "return { name = 'ask', description = 'asks first', needs_approval = true,\n"
                           "  input_schema = {type = 'object'}, execute = function(input) return 'ran' end }\n")
    lua_tool(d, "plain.lua", "return { name = 'plain', description = 'a string', input_schema = {type = 'object',\n"
                             "  properties = {n = {type = 'integer'}}, required = {}},\n"
                             "  execute = function(input) return string.rep('ab', input.n or 2) end }\n")
    r = make_runner(**{"tools.describe_timeout": 2})
    names = {s.name for s in r.tools()}
    assert {"boom", "plain"} <= names and not names & {"syntax", "noexec", "notable", "spin"}
    errors = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in r.custom_errors()}
    assert "cannot load" in errors["syntax.lua"]
    assert "no execute function" in errors["noexec.lua"]
    assert "no tool record" in errors["notable.lua"]
    assert "did not finish within 2s" in errors["spin.lua"]
    res = r.call("boom", {})
    assert res.is_error and "Lua error" in res.content and "kaput" in res.content
    assert r.call("plain", {"n": 3}).content == "ababab"
    assert r.call("plain", {}).content == "abab"
    flags = {s.name: s.needs_approval for s in r.tools()}
    assert flags["ask"] is True and flags["plain"] is False


def test_lua_needs_approval_goes_through_the_policy(make_runner, workspace):
    lua_tool(workspace / "tools", "ask.lua", "return { name = 'ask', description = 'asks first', needs_approval = true,\n"
                                             "  input_schema = {type = 'object'}, execute = function() return 'ran' end }\n")
    res = make_runner(approval="deny").call("ask", {})
    assert res.is_error and "needs approval" in res.content and res.meta["error_type"] == "gated"
    assert make_runner(approval="allow").call("ask", {}).content == "ran"
