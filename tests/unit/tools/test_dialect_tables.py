"""The dialect tables themselves: every tool maps onto a native tool and native arguments, every
schema is valid JSON Schema, the seeds' examples translate into arguments the native tool accepts,
and the units convert as the seeds say. No sandbox: these are the tables."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import AliasChoices

from runner.tools import dialects
from runner.tools.dialects.base import DialectArgError
from runner.policy.model import Policy
from runner.tools.schemas import formats, registry

ROWS = [(name, row) for name in dialects.names() for row in dialects.get(name).table().values()]


def native_names(model) -> set[str]:
    out = set()
    for name, f in model.model_fields.items():
        out.add(name)
        if f.alias:
            out.add(f.alias)
        if isinstance(f.validation_alias, AliasChoices):
            out |= {c for c in f.validation_alias.choices if isinstance(c, str)}
        elif isinstance(f.validation_alias, str):
            out.add(f.validation_alias)
    return out


def test_the_dialects_are_the_packages_modules_and_the_policy_takes_exactly_those():
    """A dialect registers itself by being a module of the package whose DIALECT has its name; the
    policy checks `dialect:` against that registry (no list of names of its own)."""
    here = Path(dialects.__file__).parent
    assert set(dialects.names()) == {f.stem.replace("_", "-") for f in here.glob("*.py")} - {"--init--", "base"}
    assert set(dialects.names()) >= {"ah", "acai", "forgekeeper", "go-agent", "miclaw"}
    for name in dialects.names():
        assert dialects.get(name).name == name
        assert Policy.model_validate({"dialect": name}).dialect == name
    with pytest.raises(ValueError, match="'nope' is not a dialect"):
        Policy.model_validate({"dialect": "nope"})
    with pytest.raises(Exception, match="unknown dialect 'nope'"):
        dialects.get("nope")
    assert "Literal" not in str(Policy.model_fields["dialect"].annotation)


def test_a_dialect_registered_from_elsewhere_is_one_the_policy_takes(monkeypatch):
    monkeypatch.setattr(dialects, "_registered", {"ah-again": "runner.tools.dialects.ah:DIALECT"})
    assert "ah-again" in dialects.names()
    assert Policy.model_validate({"dialect": "ah-again"}).dialect == "ah-again"
    with pytest.raises(ValueError, match="is the dialect 'ah', not 'ah-again'"):
        dialects.get("ah-again")


@pytest.mark.parametrize("dialect,row", ROWS, ids=lambda x: getattr(x, "name", x))
def test_every_tool_maps_onto_a_native_tool_and_its_arguments(dialect, row):
    assert registry.exists(row.native), f"{dialect}.{row.name} -> {row.native}: no such native tool"
    native = registry.get(row.native).model
    if row.model is None:  # runner's own tool under its own name
        assert row.name == row.native
        return
    accepted = native_names(native)
    for field in row.model.model_fields:
        if field in row.answer_only:
            continue
        target = row.args.get(field, field)
        target = target[0] if isinstance(target, tuple) else target
        assert target in accepted, f"{dialect}.{row.name}: {field} -> {target}, which {row.native} does not take"
    for key in row.fixed:
        assert key in accepted
    for key in row.args:
        assert key in row.model.model_fields, f"{dialect}.{row.name}: args names {key}, not in its model"


@pytest.mark.parametrize("name", dialects.names())
def test_schemas_are_valid_json_schema_in_every_format(name):
    d = dialects.get(name)
    specs = [row.spec(registry.get(row.native)) for row in d.table().values()]
    for fmt in ("openai", "anthropic", "mcp", "json"):
        exported = json.loads(formats.export(specs, fmt))
        assert len(exported) == len(specs)
    for spec in specs:
        schema = spec.schema()
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
    assert not set(d.not_offered) & set(d.table()), "a tool both offered and not offered"


# The seeds' own example calls: each translates into arguments its native tool validates.
EXAMPLES = [
    ("ah", "read", {"path": "a.txt", "offset": 2, "limit": 10}),
    ("ah", "bash", {"command": "ls", "timeout": 1500}),
    ("ah", "edit", {"path": "a", "old_string": "x", "new_string": "y"}),
    ("forgekeeper", "echo", {"text": "Hello, World!"}),
    ("forgekeeper", "get_time", {}),
    ("forgekeeper", "read_file", {"file": "notes.txt", "maxBytes": 1024}),
    ("forgekeeper", "read_dir", {"path": "data"}),
    ("forgekeeper", "write_file", {"file": "output.txt", "content": "Hello, World!", "overwrite": True}),
    ("forgekeeper", "http_fetch", {"url": "https://api.github.com/repos/gatewaybuddy/forgekeeper", "maxBytes": 10240,
                                   "timeout_ms": 5000, "headers": {"accept": "application/json"}}),
    ("forgekeeper", "git_status", {}),
    ("forgekeeper", "git_diff", {"staged": True}),
    ("forgekeeper", "git_add", {"files": ["README.md", "docs/tooling/QUICKSTART.md"]}),
    ("forgekeeper", "git_commit", {"message": "feat: Add comprehensive tool documentation"}),
    ("forgekeeper", "git_push", {"remote": "origin", "branch": "feat/tool-docs"}),
    ("forgekeeper", "git_pull", {"remote": "origin", "branch": "main"}),
    ("forgekeeper", "run_bash", {"script": "ls -la | grep .md", "timeout_ms": 5000}),
    ("forgekeeper", "refresh_tools", {}),
    ("go-agent", "read", {"path": "pkg/agent/loop.go", "offset": 1, "limit": 50}),
    ("go-agent", "bash", {"command": "go test ./... 2>&1", "timeout": 60}),
    ("go-agent", "edit", {"path": "main.go", "old_text": 'fmt.Println("hello")', "new_text": 'fmt.Println("world")'}),
    ("go-agent", "write", {"path": "notes.md", "content": "# Notes\n\n- item one\n"}),
    ("go-agent", "grep", {"pattern": "func.*Handler", "path": ".", "glob": "*.go", "context_lines": 2}),
    ("go-agent", "find", {"path": ".", "pattern": "*_test.go", "type": "file"}),
    ("go-agent", "ls", {"path": "pkg/agent", "show_hidden": False}),
    ("go-agent", "web_search", {"query": "golang 1.24 release notes", "max_results": 5}),
    ("go-agent", "web_fetch", {"url": "https://go.dev/doc/go1.24", "max_bytes": 51200}),
    ("miclaw", "read", {"path": "a.go", "offset": 0, "limit": 10}),
    ("miclaw", "edit", {"path": "a.go", "old_text": "x", "new_text": "y"}),
    ("miclaw", "apply_patch", {"patch": "*** Begin Patch\n*** Delete File: a\n*** End Patch\n"}),
    ("miclaw", "grep", {"pattern": "x", "include": "*.go"}),
    ("miclaw", "glob", {"pattern": "**/*.go"}),
    ("miclaw", "ls", {"path": "."}),
    ("miclaw", "exec", {"command": "make", "workdir": "src", "background": True, "timeout": 60}),
    ("miclaw", "process", {"action": "signal", "process_id": "42", "signal": "SIGTERM"}),
    ("miclaw", "memory_search", {"query": "deploy"}),
    ("miclaw", "memory_get", {"path": "MEMORY.md", "from": 3, "lines": 5}),
]


@pytest.mark.parametrize("name,tool,args", EXAMPLES, ids=lambda x: x if isinstance(x, str) else "")
def test_seed_examples_translate_into_valid_native_calls(name, tool, args):
    d = dialects.get(name)
    row = d.table()[tool]
    dargs, nargs = row.translate(args, d)
    registry.validate_args(row.native, nargs)  # raises ToolArgError if the native tool would refuse


def native(name: str, tool: str, args: dict) -> dict:
    d = dialects.get(name)
    return d.table()[tool].translate(args, d)[1]


def test_units_and_defaults_convert_as_the_seeds_say():
    assert native("ah", "bash", {"command": "x", "timeout": 1500})["timeout"] == 1.5  # ms
    assert native("ah", "bash", {"command": "x"})["timeout"] == 120.0  # ah's default, 120 s
    assert native("forgekeeper", "run_bash", {"script": "x"}) == {"command": "x", "timeout": 15.0,  # 15000 ms
                                                                  "separate_stderr": True}
    assert native("forgekeeper", "http_fetch", {"url": "http://x", "timeout_ms": 5000})["timeout"] == 5.0
    assert native("forgekeeper", "read_file", {"file": "a"}) == {"path": "a", "raw": True}
    assert native("forgekeeper", "write_file", {"file": "a", "content": "b"}) == {"path": "a", "content": "b",
                                                                                   "overwrite": False}
    assert native("go-agent", "bash", {"command": "x"})["timeout"] == 120  # seconds
    assert native("go-agent", "bash", {"command": "x", "timeout": 60})["timeout"] == 60
    assert native("go-agent", "grep", {"pattern": "x"})["ignore_case"] is True  # case-insensitive by default
    assert native("go-agent", "grep", {"pattern": "x", "case_sensitive": True})["ignore_case"] is False
    assert native("go-agent", "edit", {"path": "p", "old_text": "a", "new_text": "b"}) == {
        "path": "p", "old_string": "a", "new_string": "b"}
    assert native("go-agent", "find", {})["pattern"] == "*" and native("go-agent", "find", {})["type"] is None
    assert native("go-agent", "web_search", {"query": "q"})["max_results"] == 10
    assert native("go-agent", "web_fetch", {"url": "u"})["max_bytes"] == 51_200
    assert native("miclaw", "exec", {"command": "x"})["timeout"] == 1800  # seconds, its default
    assert native("miclaw", "exec", {"command": "x", "timeout": 3})["timeout"] == 10  # its minimum
    assert native("miclaw", "read", {"path": "a", "offset": 0})["offset"] == 1  # 0-based
    assert native("miclaw", "process", {"action": "poll", "process_id": "7", "input": "x"}) == {
        "action": "poll", "pid": 7, "data": "x"}
    assert native("miclaw", "memory_search", {"query": "q"}) == {"query": "q", "max_results": 6, "min_score": 0.35}


def test_refusals_are_in_the_seeds_words():
    def refused(name, tool, args):
        d = dialects.get(name)
        with pytest.raises(DialectArgError) as e:
            d.table()[tool].translate(args, d)
        return str(e.value)

    assert refused("forgekeeper", "write_file", {}) == "file and content are required"
    assert refused("forgekeeper", "run_bash", {"script": "x", "timeout_ms": "soon"}) == (
        "Argument 'timeout_ms' must be of type integer")
    assert refused("go-agent", "bash", {}) == 'validation error: missing required parameter "command"'
    assert refused("miclaw", "exec", {"command": "x", "env": {}}).startswith("exec: argument env is not offered")
    assert refused("ah", "bash", {"command": "x", "timeout": 0}) == (
        "invalid arguments for bash: timeout: Input should be greater than 0")


def test_listing_notes_name_what_is_not_offered():
    fk = dialects.get("forgekeeper").listing_notes()
    for tool in ("write_repo_file", "run_powershell", "restart_frontend", "create_task_card", "check_pr_status"):
        assert any(line.startswith(f"not offered: {tool}: ") for line in fk)
    mc = dialects.get("miclaw").listing_notes()
    assert "not offered: exec(env): runner's exec takes no environment: set variables in the command (K=V cmd)" in mc
    assert any(line.startswith("not offered: cron: ") for line in mc)


def test_forgekeeper_http_fetch_answer_from_the_native_one():
    """http_fetch's object, built from the native answer's text and meta (the sandboxes here have
    no network to fetch from; the native tool's own tests cover fetching)."""
    from types import SimpleNamespace

    from runner.tools.dialects.base import Answer
    from runner.reporting.redact import Redactor
    from runner.results import ToolResult

    d = dialects.get("forgekeeper")
    row = d.table()["http_fetch"]
    fake = SimpleNamespace(redactor=Redactor())

    def answer(status, body, is_error=False):
        native = ToolResult(content=f"status: {status}\nurl: https://x.test/b\ncontent-type: application/json\n"
                                    f"bytes: {len(body)}\n\n{body}", is_error=is_error,
                            meta={"status": status, "url": "https://x.test/b", "bytes": len(body), "truncated": False})
        args, _ = row.translate({"url": "https://x.test/a"}, d)
        return row.answer(Answer(native, args, {}, fake, d, row))

    ok = answer(200, '{"name": "forgekeeper"}')
    assert not ok.is_error and json.loads(ok.content) == {
        "url": "https://x.test/a", "finalUrl": "https://x.test/b", "ok": True, "status": 200,
        "contentType": "application/json", "bytes": 23, "truncated": False, "text": '{"name": "forgekeeper"}'}
    missing = answer(404, "not here", is_error=True)  # an HTTP answer, not a failure: ok false
    assert not missing.is_error and json.loads(missing.content)["ok"] is False
    failed = row.answer(Answer(ToolResult.error("fetching https://x.test/a failed: refused"), {}, {}, fake, d, row))
    assert failed.is_error and failed.content == "fetching https://x.test/a failed: refused"
