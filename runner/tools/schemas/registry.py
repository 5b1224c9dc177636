"""The built-in tools: their specs, presets, and argument validation.

A built-in tool's facts are declared once, on its ToolSpec: its argument model, whether it writes
(the `writes` gate and the protected-path check, with the paths it writes), reaches the network
(`network_tools`), runs commands (`bash`), streams its output, may go to a lent shell, is answered
by the controller instead of the agent, and which agent function runs it. Every table that needs
one of them is derived here: gates() for the policy, streaming(), lent_tools(), agent_table()
(which the agent's own table, stdlib-only in the sandbox, is checked against).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

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
    runs_commands: bool = False  # switched off with features.bash
    streams: bool = False  # its output streams as it comes: to Runner.call's on_output, within the store's caps
    agent: tuple[str, str] | None = None  # (module, function) of the agent that runs it
    on_controller: str | None = None  # the Runner method that answers it instead of the agent
    paths_written: Callable[[dict], list[str]] | None = None  # from its arguments: the protected-path check
    lent_unless: tuple[str, ...] | None = None  # may go to a lent shell unless one of these arguments is set
    background: str | None = None  # the argument that runs it in the background (refused for host commands)
    repo_programs: bool = False  # git: the repository's config may run programs unless told not to

    def schema(self) -> dict:
        s = self.model.model_json_schema(by_alias=True)
        s.pop("title", None)
        for prop in s.get("properties", {}).values():
            prop.pop("title", None)
        return s


def _spec(name, description, model, guidance="", **kw) -> ToolSpec:
    return ToolSpec(name, description, model, guidance, **kw)


def _path_arg(args: dict) -> list[str]:
    return [args["path"]]


def _patch_paths(args: dict) -> list[str]:
    from ...agent.context import ToolError
    from ...agent.patch import patch_paths

    try:
        return patch_paths(args["patch"])
    except ToolError:
        return []  # the agent answers the parse error itself


def _git(name: str, description: str, model, **kw) -> ToolSpec:
    return _spec(name, description, model, agent=("gitops", name), repo_programs=True, **kw)


SPECS: dict[str, ToolSpec] = {s.name: s for s in (
    _spec("read", "Read a text file (numbered lines, paged), or an image.", A.Read,
          "Pages stop at 2000 lines or 50 KiB; the notice at the end names the offset to continue with. "
          "Binary files are refused; png/jpg/gif/webp come back as images.", agent=("files", "read")),
    _spec("write", "Create or replace a file with the given content (atomically).", A.Write,
          "Creates parent directories. Prefer edit for changing part of an existing file.", writes=True,
          paths_written=_path_arg, agent=("files", "write")),
    _spec("edit", "Replace exact text in a file: one unique match, replace_all, or several edits at once.", A.Edit,
          "old_string must match exactly once unless replace_all; include surrounding lines to make it unique. "
          "edits are applied in order, all or nothing. Line endings and a BOM are kept.", writes=True,
          paths_written=_path_arg, agent=("files", "edit")),
    _spec("apply_patch", "Apply a patch ('*** Begin Patch' envelope or unified diff) to one or more files, "
          "all or nothing.", A.ApplyPatch,
          "Envelope: '*** Add File: p' (+lines), '*** Delete File: p', '*** Update File: p' with '@@' context hunks "
          "and optional '*** Move to: q'.", writes=True, paths_written=_patch_paths,
          agent=("patch", "apply_patch")),
    _spec("ls", "List a directory (directories end in /), optionally a few levels deep.", A.Ls,
          agent=("listing", "ls")),
    _spec("read_dir", "List a directory as JSON entries: path, type, size.", A.ReadDir, agent=("listing", "read_dir")),
    _spec("glob", "Find files by glob pattern (** for any depth), sorted, at most 1000.", A.Glob,
          agent=("listing", "glob")),
    _spec("find", "Find files or directories whose name matches a glob or contains a substring.", A.Find,
          agent=("listing", "find")),
    _spec("grep", "Search file contents with a regular expression; answers path:line:text.", A.Grep,
          "Skips .git, node_modules, binary files and what the root .gitignore ignores. Use include to limit "
          "to file globs and literal for plain text.", agent=("listing", "grep")),
    _spec("bash", "Run a bash command in the workspace; output is stdout and stderr interleaved.", A.Bash,
          "Default timeout 120 s (capped by the policy); on timeout the whole process tree is killed. Long "
          "output keeps its head and tail; the notice says how to read the rest with the result tool.",
          runs_commands=True, streams=True, lent_unless=("cwd", "separate_stderr"), agent=("procs", "bash")),
    _spec("exec", "Run a command, in the foreground (with optional stdin) or in the background.", A.Exec,
          "background: true answers a pid at once; use the process tool to poll, send input, signal or kill it.",
          runs_commands=True, streams=True, lent_unless=("working_dir", "background"), background="background",
          agent=("procs", "exec_")),
    _spec("process", "Manage background commands started by exec: list, status, poll, input, signal, kill.", A.Process,
          runs_commands=True, agent=("procs", "process")),
    _spec("result", "Read the full output that a truncated answer kept, by call id, a page of lines at a time.", A.Result,
          on_controller="_result_tool"),
    _spec("http_fetch", "Fetch an http(s) URL and answer its status, type and (readable) text.", A.HttpFetch,
          "Obeys the policy's network rules; link-local and metadata addresses are never reached.", network=True,
          agent=("net", "http_fetch")),
    _spec("web_fetch", "Same as http_fetch.", A.HttpFetch, network=True, agent=("net", "http_fetch")),
    _spec("web_search", "Search the web through the search endpoint the policy names.", A.WebSearch, network=True,
          agent=("net", "web_search")),
    _git("git_status", "git status of the workspace.", A.Empty),
    _git("git_diff", "git diff (staged with staged: true; one path with path).", A.GitDiff),
    _git("git_log", "Recent commits, one line each.", A.GitLog),
    _git("git_add", "Stage files for the next commit.", A.GitAdd, writes=True),
    _git("git_commit", "Commit what is staged, with a message.", A.GitCommit, writes=True),
    _git("git_push", "Push to a remote (usually a host command: it needs the host's credentials).", A.GitRemote,
          writes=True, network=True),
    _git("git_pull", "Pull from a remote (usually a host command).", A.GitRemote, writes=True, network=True),
    _spec("echo", "Answer the given text (at most 10,000 characters).", A.Echo, agent=("small", "echo")),
    _spec("get_time", "The current time, ISO 8601 UTC.", A.Empty, agent=("small", "get_time")),
    _spec("refresh_tools", "Rescan custom tool folders and answer the tool names.", A.Empty,
          on_controller="_refresh_tool"),
    _spec("memory_search", "Search MEMORY.md and memory/*.md in the workspace (lexical ranking).", A.MemorySearch,
          agent=("small", "memory_search")),
    _spec("memory_get", "Read MEMORY.md or a memory/*.md file, optionally a range of lines.", A.MemoryGet,
          agent=("small", "memory_get")),
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
    """Paths a writing tool would write (for the protected-path check): its spec's paths_written."""
    spec = SPECS.get(tool)
    return [] if spec is None or spec.paths_written is None else spec.paths_written(args)


# -- the tables derived from the specs -----------------------------------------------------------
@functools.lru_cache(maxsize=1)
def gates() -> dict[str, frozenset[str]]:
    """features.<gate> -> the tools it switches off (the policy's gate map)."""
    return {"bash": frozenset(s.name for s in SPECS.values() if s.runs_commands),
            "network_tools": frozenset(s.name for s in SPECS.values() if s.network),
            "writes": frozenset(s.name for s in SPECS.values() if s.writes)}


@functools.lru_cache(maxsize=1)
def streaming() -> frozenset[str]:
    """The tools whose output streams as it comes."""
    return frozenset(s.name for s in SPECS.values() if s.streams)


@functools.lru_cache(maxsize=1)
def lent_tools() -> dict[str, tuple[str, ...]]:
    """Tool -> the arguments that keep a call of it on the agent's path (runner/controller/lent_shells.py)."""
    return {s.name: s.lent_unless for s in SPECS.values() if s.lent_unless is not None}


def agent_table() -> dict[str, tuple[str, str]]:
    """Tool -> (module, function) of the agent: what runner/agent/server.py's TOOLS holds for the
    built-in tools (the agent is stdlib-only and cannot import this; a test holds the two equal)."""
    return {s.name: s.agent for s in SPECS.values() if s.agent is not None}
