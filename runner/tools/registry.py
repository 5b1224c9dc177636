"""The tool registry: every tool's spec (name, description, guidance, argument model, flags),
the presets, and argument validation.

    args = validate_args("read", {"file_path": "a.txt", "offset": "2"})
    # {"path": "a.txt", "offset": 2, "limit": None}

Built-in tool bodies run in the sandbox (runner/agent); `result` and `refresh_tools` run on
the controller. The registry is the only module-level state of the package.
"""
from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ValidationError

from . import args as A


class ToolArgError(ValueError):
    """Arguments a tool cannot take, or a tool that does not exist. str() is the message."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: Optional[type[BaseModel]] = None
    guidance: str = ""
    writes: bool = False
    network: bool = False
    needs_approval: bool = False
    streams: bool = False
    where: str = "sandbox"  # sandbox | controller
    source: str = "builtin"
    input_schema: Optional[dict] = field(default=None, compare=False)  # for tools without a pydantic model

    def schema(self) -> dict:
        """The JSON Schema of the arguments (canonical names, no $refs, no titles)."""
        if self.args is not None:
            return _schema_of(self.args)
        return dict(self.input_schema or {"type": "object", "properties": {}})

    def arg_names(self) -> list[str]:
        return list(self.schema().get("properties", {}))


# -- JSON Schema clean-up -------------------------------------------------------------------
def _inline(node: Any, defs: dict) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **rest}, defs)
        out = {}
        for k, v in node.items():
            if k in ("title", "$defs"):
                continue
            out[k] = _inline(v, defs)
        # Optional[X] = anyOf [X, null]: shown as X (absent and null both mean "use the default")
        any_of = out.get("anyOf")
        if isinstance(any_of, list) and len(any_of) == 2 and {"type": "null"} in any_of:
            other = next(s for s in any_of if s != {"type": "null"})
            out.pop("anyOf")
            out = {**other, **out}
            if out.get("default", 0) is None:
                out.pop("default")
        return out
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


@functools.lru_cache(maxsize=None)
def _schema_cached(model: type[BaseModel]) -> dict:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _inline(raw, raw.get("$defs", {}))
    schema.setdefault("properties", {})
    schema["type"] = "object"
    schema["additionalProperties"] = False
    return schema


def _schema_of(model: type[BaseModel]) -> dict:
    import copy

    return copy.deepcopy(_schema_cached(model))


# -- the built-in tools ---------------------------------------------------------------------
_BUILTINS = [
    ToolSpec("read", "Read a text file with numbered lines (like cat -n), a page at a time; images come back as "
             "images.", A.ReadArgs,
             "A page is at most 2000 lines or 50 KiB and ends with the offset that continues. Read before editing, "
             "and copy text for edit exactly from what read shows (without the line-number prefix)."),
    ToolSpec("write", "Create or replace a whole file (parent directories are created).", A.WriteArgs,
             "Prefer edit or apply_patch to change part of an existing file.", writes=True),
    ToolSpec("edit", "Replace exact text in a file: old_string must match once (or set replace_all); several "
             "edits apply all or nothing.", A.EditArgs,
             "Include enough surrounding lines in old_string to make it unique. Line endings and a BOM are kept.",
             writes=True),
    ToolSpec("apply_patch", "Apply a patch to one or more files, all or nothing: a `*** Begin Patch` envelope or a "
             "unified diff.", A.ApplyPatchArgs,
             "Envelope: `*** Begin Patch`, then `*** Add File: P` (lines starting with +), `*** Delete File: P`, or "
             "`*** Update File: P` (optional `*** Move to: Q`) with `@@` hunks of ' ', '-', '+' lines, then "
             "`*** End Patch`.", writes=True),
    ToolSpec("ls", "List a directory: names sorted, directories end in /.", A.LsArgs),
    ToolSpec("read_dir", "List a directory as JSON entries (path, type, size).", A.ReadDirArgs),
    ToolSpec("glob", "Find files whose path matches a glob (`**` crosses directories), sorted, at most 1000.",
             A.GlobArgs),
    ToolSpec("find", "Find files or directories by name: a glob or a substring.", A.FindArgs),
    ToolSpec("grep", "Search file contents with a regular expression; answers path:line:text.", A.GrepArgs,
             "Skips .git, node_modules, binary files and what the root .gitignore ignores. Use include to "
             "narrow by file name and literal for plain text."),
    ToolSpec("bash", "Run a shell command (bash -c) in the workspace; stdout and stderr together, exit code on "
             "failure.", A.BashArgs,
             "Long output keeps its head and tail; the full text can be paged with result. The command's whole "
             "process tree is killed at the timeout. For servers or long jobs use exec with background true.",
             streams=True),
    ToolSpec("exec", "Run a shell command with optional stdin, or start it as a background job.", A.ExecArgs,
             "With background true it answers a pid at once; follow the job with process (poll, status, input, "
             "signal, kill).", streams=True),
    ToolSpec("process", "Follow and control background jobs started by exec: list, status, poll, input, signal, "
             "kill.", A.ProcessArgs),
    ToolSpec("http_fetch", "Fetch a URL with GET (http/https); answers status, content type, size and the body "
             "(HTML as readable text).", A.HttpFetchArgs,
             "Only hosts the policy allows are reached; link-local and metadata addresses never.", network=True),
    ToolSpec("web_fetch", "Fetch a web page and answer it as readable text.", A.WebFetchArgs, network=True),
    ToolSpec("web_search", "Search the web through the search endpoint the policy names.", A.WebSearchArgs,
             network=True),
    ToolSpec("git_status", "Show the working tree status (git status).", A.GitStatusArgs),
    ToolSpec("git_diff", "Show changes (git diff), or staged ones.", A.GitDiffArgs),
    ToolSpec("git_log", "Show recent commits (git log).", A.GitLogArgs),
    ToolSpec("git_add", "Stage files (git add).", A.GitAddArgs, writes=True),
    ToolSpec("git_commit", "Commit what is staged (git commit -m).", A.GitCommitArgs, writes=True),
    ToolSpec("git_push", "Push to a remote (git push).", A.GitPushArgs, writes=True, network=True,
             needs_approval=True),
    ToolSpec("git_pull", "Pull from a remote (git pull).", A.GitPullArgs, writes=True, network=True),
    ToolSpec("echo", "Echo the text back (at most 10,000 characters).", A.EchoArgs),
    ToolSpec("get_time", "The current time, ISO 8601 in UTC.", A.GetTimeArgs),
    ToolSpec("refresh_tools", "Rescan the custom tool folders and answer the tool names.", A.RefreshToolsArgs,
             where="controller"),
    ToolSpec("memory_search", "Search MEMORY.md and memory/*.md in the workspace; answers ranked snippets with "
             "their lines.", A.MemorySearchArgs),
    ToolSpec("memory_get", "Read lines of MEMORY.md or a memory/*.md file.", A.MemoryGetArgs),
    ToolSpec("result", "Page through the full output of an earlier call whose answer was truncated.", A.ResultArgs,
             "Truncated answers name their call id; pass it with offset and limit (lines).", where="controller"),
]

_SPECS: dict[str, ToolSpec] = {s.name: s for s in _BUILTINS}

# `result` rides along in every non-empty preset: truncated answers point to it.
PRESETS: dict[str, tuple[str, ...]] = {
    "coding": ("read", "write", "edit", "apply_patch", "bash", "ls", "glob", "grep", "result"),
    "readonly": ("read", "ls", "glob", "find", "grep", "memory_search", "memory_get", "result"),
    "web": ("http_fetch", "web_fetch", "web_search", "result"),
    "git": ("git_status", "git_diff", "git_log", "git_add", "git_commit", "git_push", "git_pull", "result"),
    "all": (),  # every registered tool, see preset()
    "none": (),
}


def register(spec: ToolSpec, replace: bool = False) -> None:
    """Add a tool (custom tools); a later registration wins only with replace=True."""
    if spec.name in _SPECS and not replace:
        raise ValueError(f"tool {spec.name} is already registered")
    _SPECS[spec.name] = spec


def unregister(name: str) -> None:
    if any(s.name == name for s in _BUILTINS):
        raise ValueError(f"{name} is a built-in tool")
    _SPECS.pop(name, None)


def exists(name: str) -> bool:
    return isinstance(name, str) and name in _SPECS


def get(name: str) -> ToolSpec:
    try:
        return _SPECS[name]
    except (KeyError, TypeError):
        raise ToolArgError(unknown_tool_message(name)) from None


def all_specs() -> list[ToolSpec]:
    return list(_SPECS.values())


def names() -> list[str]:
    return list(_SPECS)


def builtin_names() -> list[str]:
    return [s.name for s in _BUILTINS]


def preset(name: str) -> frozenset[str]:
    """The tool names of a preset."""
    if name not in PRESETS:
        raise ToolArgError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    if name == "all":
        return frozenset(_SPECS)
    return frozenset(PRESETS[name])


def unknown_tool_message(name: Any, available: Optional[Iterable[str]] = None) -> str:
    known = sorted(available if available is not None else _SPECS)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown tool: {name}{hint}. Tools that exist: {', '.join(known)}"


# -- validation -----------------------------------------------------------------------------
def _format(tool: str, spec: ToolSpec, err: ValidationError) -> str:
    allowed = ", ".join(spec.arg_names()) or "no arguments"
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(x) for x in e.get("loc", ()))
        msg = str(e.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if e.get("type") == "extra_forbidden":
            msg = f"unknown argument ({tool} takes: {allowed})"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"invalid arguments for {tool}: " + "; ".join(dict.fromkeys(parts))


def _check_schema(tool: str, spec: ToolSpec, args: dict) -> dict:
    """Minimal checks for tools that bring a JSON Schema instead of a model."""
    schema = spec.schema()
    props = schema.get("properties") or {}
    missing = [r for r in schema.get("required") or [] if r not in args]
    if missing:
        raise ToolArgError(f"invalid arguments for {tool}: " + "; ".join(f"{m}: Field required" for m in missing))
    if schema.get("additionalProperties") is False:
        extra = [k for k in args if k not in props]
        if extra:
            raise ToolArgError(f"invalid arguments for {tool}: " + "; ".join(
                f"{k}: unknown argument ({tool} takes: {', '.join(props) or 'no arguments'})" for k in extra))
    return dict(args)


def validate_args(tool: str, args: Any) -> dict:
    """Canonical, defaulted and coerced arguments, or ToolArgError naming what is wrong."""
    spec = get(tool)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolArgError(f"invalid arguments for {tool}: arguments must be a JSON object, "
                           f"not {type(args).__name__}")
    if spec.args is None:
        return _check_schema(tool, spec, args)
    try:
        model = spec.args.model_validate(args)
    except ValidationError as e:
        raise ToolArgError(_format(tool, spec, e)) from None
    return model.model_dump(by_alias=True, mode="json")


def written_paths(tool: str, args: dict) -> list[str]:
    """The paths a writing tool would change (validated args), for the protected-path guard."""
    if tool in ("write", "edit"):
        return [args["path"]] if args.get("path") else []
    if tool == "apply_patch":
        from ..agent.patch import touched_paths

        return touched_paths(args.get("patch") or "")
    return []
