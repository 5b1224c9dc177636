"""The registry: specs, schemas, presets, validation messages and export formats."""
from __future__ import annotations

import json

import pytest

from runner.agent.server import TOOLS as AGENT_TOOLS
from runner.tools import formats, registry
from runner.tools.registry import ToolArgError, validate_args

TOOLS_MD_NAMES = {"read", "write", "edit", "apply_patch", "ls", "read_dir", "glob", "find", "grep", "bash", "exec",
                  "process", "result", "http_fetch", "web_fetch", "web_search", "git_status", "git_diff", "git_log",
                  "git_add", "git_commit", "git_push", "git_pull", "echo", "get_time", "refresh_tools",
                  "memory_search", "memory_get"}


def test_every_tool_of_the_contract_is_registered():
    assert set(registry.names()) == TOOLS_MD_NAMES


def test_sandbox_tools_are_exactly_the_agents():
    sandbox = {s.name for s in registry.all_specs() if s.where == "sandbox"}
    assert sandbox == set(AGENT_TOOLS)
    assert {s.name for s in registry.all_specs() if s.where == "controller"} == {"result", "refresh_tools"}


@pytest.mark.parametrize("spec", registry.all_specs(), ids=lambda s: s.name)
def test_schema_is_plain_and_canonical(spec):
    schema = spec.schema()
    text = json.dumps(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text and "anyOf" not in text
    for alias in ("old_text", "oldText", "file_path", "maxBytes", "timeout_ms", "process_id"):
        assert alias not in schema["properties"]
    assert spec.description and spec.args is not None
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{spec.name}.{name} has no description"


def test_presets():
    assert registry.preset("coding") >= {"read", "write", "edit", "apply_patch", "bash", "ls", "glob", "grep"}
    assert registry.preset("readonly") >= {"read", "ls", "glob", "find", "grep", "memory_search", "memory_get"}
    assert not registry.preset("readonly") & {s.name for s in registry.all_specs() if s.writes}
    assert registry.preset("web") >= {"http_fetch", "web_fetch", "web_search"}
    assert registry.preset("git") >= {n for n in registry.names() if n.startswith("git_")}
    assert registry.preset("all") == set(registry.names())
    assert registry.preset("none") == set()
    with pytest.raises(ToolArgError, match="unknown preset"):
        registry.preset("everything")


@pytest.mark.parametrize("tool, given, expected", [
    ("read", {"file_path": "a", "offset": "3", "limit": "10"}, {"path": "a", "offset": 3, "limit": 10}),
    ("read", {"path": "a", "offset": 0}, {"path": "a", "offset": 1, "limit": None}),
    ("read", {"path": "a", "limit": None}, {"path": "a", "offset": 1, "limit": None}),
    ("edit", {"filePath": "a", "oldText": "x", "newText": "y", "replaceAll": "true"},
     {"path": "a", "old_string": "x", "new_string": "y", "replace_all": True, "edits": None}),
    ("bash", {"script": "ls", "timeout_ms": 1500}, {"command": "ls", "timeout": 1.5, "cwd": None}),
    ("exec", {"cmd": "x", "workdir": "d", "stdin": "in", "background": "1"},
     {"command": "x", "timeout": None, "working_dir": "d", "input": "in", "background": True}),
    ("process", {"action": "POLL", "process_id": 42}, {"action": "poll", "pid": "42", "data": None, "eof": False,
                                                       "signal": None, "wait": 0.0}),
    ("grep", {"pattern": "x", "glob": "*.py", "case_sensitive": "false", "context_lines": "2"},
     {"pattern": "x", "path": ".", "include": "*.py", "exclude": None, "ignore_case": True, "literal": False,
      "context": 2, "max_results": 100}),
    ("find", {"pattern": "x", "type": "d"}, {"pattern": "x", "path": ".", "type": "dir", "max_results": 200}),
    ("http_fetch", {"url": "https://x.y", "maxBytes": "100", "timeout_ms": "2000"},
     {"url": "https://x.y", "max_bytes": 100, "timeout": 2.0, "headers": None}),
    ("git_add", {"files": "a.txt"}, {"files": ["a.txt"], "repo_path": None}),
    ("memory_get", {"path": "MEMORY.md", "from": "2"}, {"path": "MEMORY.md", "from": 2, "lines": None}),
    ("get_time", None, {}),
])
def test_validate_args_canonicalises(tool, given, expected):
    assert validate_args(tool, given) == expected


@pytest.mark.parametrize("tool, given, message", [
    ("read", {}, "invalid arguments for read: path: Field required"),
    ("read", {"path": "a", "junk": 1}, "invalid arguments for read: junk: unknown argument (read takes: path, offset, "
                                       "limit)"),
    ("read", {"path": "a", "offset": "x"}, "invalid arguments for read: offset: Input should be a valid integer"),
    ("read", "a.txt", "invalid arguments for read: arguments must be a JSON object, not str"),
    ("ls", {"depth": 9}, "invalid arguments for ls: depth: Input should be less than or equal to 5"),
    ("exec", {"command": "x", "timeout": 5000}, "invalid arguments for exec: timeout:"),
    ("edit", {"path": "a", "old_string": "x", "new_string": "y", "edits": [{"old_string": "a", "new_string": "b"}]},
     "either old_string/new_string or edits"),
    ("git_add", {"files": []}, "invalid arguments for git_add: files:"),
    ("git_add", {"files": [str(n) for n in range(101)]}, "invalid arguments for git_add: files:"),
    ("web_search", {"query": "x", "max_results": 21}, "max_results"),
    ("process", {"action": "kill"}, "needs pid"),
    ("process", {"action": "explode", "pid": 1}, "action: Input should be 'list', 'status'"),
    ("nope", {}, "unknown tool: nope"),
    ("gerp", {}, "did you mean grep?"),
])
def test_validation_errors_name_the_argument(tool, given, message):
    with pytest.raises(ToolArgError) as e:
        validate_args(tool, given)
    assert message in str(e.value)


def test_megabyte_arguments_validate():
    big = "x" * (5 << 20)
    assert len(validate_args("write", {"path": "a", "content": big})["content"]) == 5 << 20


def test_written_paths():
    assert registry.written_paths("write", {"path": "a/b"}) == ["a/b"]
    assert registry.written_paths("apply_patch", {"patch": "*** Begin Patch\n*** Update File: x\n*** Move to: .git/hooks/y\n"
                                                           "@@\n-a\n+b\n*** End Patch"}) == ["x", ".git/hooks/y"]
    assert registry.written_paths("read", {"path": "a"}) == []


def test_register_a_custom_tool_with_a_json_schema():
    spec = registry.ToolSpec("my_tool", "Does a thing.", input_schema={
        "type": "object", "properties": {"args": {"type": "string"}}, "required": ["args"],
        "additionalProperties": False}, source="project", where="sandbox")
    registry.register(spec)
    try:
        assert validate_args("my_tool", {"args": "x"}) == {"args": "x"}
        with pytest.raises(ToolArgError, match="args: Field required"):
            validate_args("my_tool", {})
        with pytest.raises(ToolArgError, match="zz: unknown argument"):
            validate_args("my_tool", {"args": "x", "zz": 1})
        with pytest.raises(ValueError):
            registry.register(spec)
    finally:
        registry.unregister("my_tool")
    assert not registry.exists("my_tool")


@pytest.mark.parametrize("fmt", ["json", "openai", "anthropic", "mcp"])
def test_json_formats(fmt):
    out = json.loads(formats.export(registry.all_specs(), fmt))
    assert len(out) == len(registry.all_specs())
    first = out[0]
    if fmt == "openai":
        assert first["type"] == "function" and first["function"]["name"] == "read"
        assert first["function"]["parameters"]["required"] == ["path"]
    elif fmt == "anthropic":
        assert set(first) == {"name", "description", "input_schema"}
    elif fmt == "mcp":
        assert {"name", "description", "inputSchema"} <= set(first)
        assert first["annotations"]["readOnlyHint"] is True
    else:
        assert first["parameters"]["properties"]["path"]["type"] == "string" and "guidance" in first


def test_table_and_prompt():
    specs = [registry.get(n) for n in ("read", "git_push")]
    table = formats.export(specs, "table")
    assert table.splitlines()[0].split() == ["TOOL", "ARGS", "FLAGS", "SOURCE", "DESCRIPTION"]
    assert "path, offset?, limit?" in table and "writes,network,approval" in table
    prompt = formats.prompt(specs)
    assert prompt.startswith("Tools: read, git_push") and "## read" in prompt
    with pytest.raises(ValueError, match="unknown format"):
        formats.export(specs, "yaml")


def test_lazy_package_exports():
    import runner.tools as t

    assert t.validate_args is validate_args and t.ToolSpec is registry.ToolSpec and "openai" in t.FORMATS
