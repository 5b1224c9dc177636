"""The built-in tools: their specs, presets, and argument validation."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ...errors import RunnerError
from . import args as A


class ToolArgError(RunnerError):
    """Arguments that do not fit a tool's schema; the message names the argument."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    model: type[BaseModel]
    guidance: str = ""
    writes: bool = False
    network: bool = False
    needs_approval: bool = False
    source: str = "builtin"
    tags: tuple[str, ...] = field(default_factory=tuple)

    def schema(self) -> dict:
        s = self.model.model_json_schema(by_alias=True)
        s.pop("title", None)
        for prop in s.get("properties", {}).values():
            prop.pop("title", None)
        return s


def _spec(name, description, model, guidance="", **kw) -> ToolSpec:
    return ToolSpec(name, description, model, guidance, **kw)


SPECS: dict[str, ToolSpec] = {s.name: s for s in (
    _spec("read", "Read a text file (numbered lines, paged), or an image.", A.Read,
          "Pages stop at 2000 lines or 50 KiB; the notice at the end names the offset to continue with. "
          "Binary files are refused; png/jpg/gif/webp come back as images."),
    _spec("write", "Create or replace a file with the given content (atomically).", A.Write,
          "Creates parent directories. Prefer edit for changing part of an existing file.", writes=True),
    _spec("edit", "Replace exact text in a file: one unique match, replace_all, or several edits at once.", A.Edit,
          "old_string must match exactly once unless replace_all; include surrounding lines to make it unique. "
          "edits are applied in order, all or nothing. Line endings and a BOM are kept.", writes=True),
    _spec("apply_patch", "Apply a patch ('*** Begin Patch' envelope or unified diff) to one or more files, "
          "all or nothing.", A.ApplyPatch,
          "Envelope: '*** Add File: p' (+lines), '*** Delete File: p', '*** Update File: p' with '@@' context hunks "
          "and optional '*** Move to: q'.", writes=True),
    _spec("ls", "List a directory (directories end in /), optionally a few levels deep.", A.Ls),
    _spec("read_dir", "List a directory as JSON entries: path, type, size.", A.ReadDir),
    _spec("glob", "Find files by glob pattern (** for any depth), sorted, at most 1000.", A.Glob),
    _spec("find", "Find files or directories whose name matches a glob or contains a substring.", A.Find),
    _spec("grep", "Search file contents with a regular expression; answers path:line:text.", A.Grep,
          "Skips .git, node_modules, binary files and what the root .gitignore ignores. Use include to limit "
          "to file globs and literal for plain text."),
    _spec("bash", "Run a bash command in the workspace; output is stdout and stderr interleaved.", A.Bash,
          "Default timeout 120 s (capped by the policy); on timeout the whole process tree is killed. Long "
          "output keeps its head and tail; the notice says how to read the rest with the result tool."),
    _spec("exec", "Run a command, in the foreground (with optional stdin) or in the background.", A.Exec,
          "background: true answers a pid at once; use the process tool to poll, send input, signal or kill it."),
    _spec("process", "Manage background commands started by exec: list, status, poll, input, signal, kill.", A.Process),
    _spec("result", "Read the full output that a truncated answer kept, by call id, a page of lines at a time.", A.Result),
    _spec("http_fetch", "Fetch an http(s) URL and answer its status, type and (readable) text.", A.HttpFetch,
          "Obeys the policy's network rules; link-local and metadata addresses are never reached.", network=True),
    _spec("web_fetch", "Same as http_fetch.", A.HttpFetch, network=True),
    _spec("web_search", "Search the web through the search endpoint the policy names.", A.WebSearch, network=True),
    _spec("git_status", "git status of the workspace.", A.Empty),
    _spec("git_diff", "git diff (staged with staged: true; one path with path).", A.GitDiff),
    _spec("git_log", "Recent commits, one line each.", A.GitLog),
    _spec("git_add", "Stage files for the next commit.", A.GitAdd, writes=True),
    _spec("git_commit", "Commit what is staged, with a message.", A.GitCommit, writes=True),
    _spec("git_push", "Push to a remote (usually a host command: it needs the host's credentials).", A.GitRemote,
          writes=True, network=True),
    _spec("git_pull", "Pull from a remote (usually a host command).", A.GitRemote, writes=True, network=True),
    _spec("echo", "Answer the given text (at most 10,000 characters).", A.Echo),
    _spec("get_time", "The current time, ISO 8601 UTC.", A.Empty),
    _spec("refresh_tools", "Rescan custom tool folders and answer the tool names.", A.Empty),
    _spec("memory_search", "Search MEMORY.md and memory/*.md in the workspace (lexical ranking).", A.MemorySearch),
    _spec("memory_get", "Read MEMORY.md or a memory/*.md file, optionally a range of lines.", A.MemoryGet),
)}

PRESETS: dict[str, frozenset[str]] = {
    "coding": frozenset({"read", "write", "edit", "apply_patch", "bash", "ls", "glob", "grep", "result"}),
    "readonly": frozenset({"read", "ls", "glob", "find", "grep", "memory_search", "memory_get", "result"}),
    "web": frozenset({"http_fetch", "web_fetch", "web_search"}),
    "git": frozenset({"git_status", "git_diff", "git_log", "git_add", "git_commit", "git_push", "git_pull"}),
    "all": frozenset(SPECS),
    "none": frozenset(),
}


def exists(name: str) -> bool:
    return name in SPECS


def get(name: str) -> ToolSpec:
    return SPECS[name]


def all_specs() -> list[ToolSpec]:
    return list(SPECS.values())


@functools.lru_cache(maxsize=64)  # asked on every call's gate: the same few names, an immutable answer
def preset(name: str) -> frozenset[str]:
    """The tool names of a preset ('coding+git' joins presets)."""
    out: set[str] = set()
    for part in name.split("+"):
        if part not in PRESETS:
            raise KeyError(f"unknown preset {part!r}: choose one of {', '.join(PRESETS)}")
        out |= PRESETS[part]
    return frozenset(out)


def validate_args(tool: str, args: Any, spec: ToolSpec | None = None) -> dict:
    """Canonical, defaulted, coerced arguments, or ToolArgError naming the argument.
    `spec`: a tool that is not in SPECS (a custom tool)."""
    if not isinstance(args, dict):
        raise ToolArgError(f"invalid arguments for {tool}: expected a JSON object, got {type(args).__name__}")
    try:
        model = (spec or SPECS[tool]).model.model_validate(args)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(arguments)"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unexpected argument (not in this tool's schema)"
            problems.append(f"{loc}: {msg}")
        raise ToolArgError(f"invalid arguments for {tool}: " + "; ".join(problems)) from None
    return model.model_dump(by_alias=True, exclude_none=False)


def written_paths(tool: str, args: dict) -> list[str]:
    """Paths a writing tool would write (for the protected-path check)."""
    if tool in ("write", "edit"):
        return [args["path"]]
    if tool == "apply_patch":
        from ...agent.context import ToolError
        from ...agent.patch import patch_paths

        try:
            return patch_paths(args["patch"])
        except ToolError:
            return []  # the agent answers the parse error itself
    return []
