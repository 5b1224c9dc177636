"""miclaw (seed 004): read (0-based offset), write, edit (`old_text`/`new_text`), apply_patch,
grep, glob, ls, exec (timeout in seconds, 1800 by default, at least 10) and process
(`process_id`), memory_search and memory_get. Host commands routed over SSH are runner's own
(policy host_commands): exec goes the same way as bash."""
from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field

from ...results import ToolResult
from .base import OLD_TEXT_ERRORS, Answer, Dialect, DialectArgs, Tool, at_least, plus_one, to_int


class Read(DialectArgs):
    path: str
    offset: Optional[int] = Field(None, ge=0, description="start line (0-based)")
    limit: Optional[int] = Field(None, ge=1, description="max lines")


class Write(DialectArgs):
    path: str
    content: str


class Edit(DialectArgs):
    path: str
    old_text: str = Field(description="required, must be unique in file")
    new_text: str


class ApplyPatch(DialectArgs):
    patch: str = Field(description="*** Begin Patch … *** End Patch (Add File, Update File with @@ context, "
                                   "Delete File)")


class Grep(DialectArgs):
    pattern: str = Field(description="regex")
    path: Optional[str] = Field(None, description="directory to search (default: workspace)")
    include: Optional[str] = Field(None, description='glob filter (e.g., "*.go")')


class Glob(DialectArgs):
    pattern: str = Field(description='e.g. "**/*.go"')
    path: Optional[str] = Field(None, description="root directory (default: workspace)")


class Ls(DialectArgs):
    path: str


class Exec(DialectArgs):
    command: str
    workdir: Optional[str] = None
    background: bool = Field(False, description="yield immediately")
    timeout: int = Field(1800, ge=1, description="seconds (default 1800, minimum 10)")


class Process(DialectArgs):
    action: Literal["status", "input", "signal", "poll"]
    process_id: str
    input: Optional[str] = Field(None, description="for stdin")
    signal: Optional[str] = Field(None, description="for signals (SIGTERM, etc.)")


class MemorySearch(DialectArgs):
    query: str
    max_results: int = Field(6, ge=1, le=50)
    min_score: float = Field(0.35, ge=0)


class MemoryGet(DialectArgs):
    path: str
    from_: Optional[int] = Field(None, ge=1, alias="from", description="start line")
    lines: Optional[int] = Field(None, ge=1, description="number of lines")


_NEXT = re.compile(r"continue with offset (\d+)\]$")


def _zero_based(a: Answer) -> ToolResult:
    """read's continuation notice names the next offset 0-based, as miclaw's offset is."""
    if a.result.is_error or not isinstance(a.result.content, str):
        return a.result
    text = _NEXT.sub(lambda m: f"continue with offset {int(m.group(1)) - 1}]", a.text)
    return ToolResult(content=text, meta=a.result.meta)


DIALECT = Dialect(
    name="miclaw",
    seed="004_855e890a003b36b5.txt",
    tools=(
        Tool("read", "read", Read, "Read file contents with pagination for large files.",
             args={"offset": ("offset", plus_one)}, answer=_zero_based),
        Tool("write", "write", Write, "Create or overwrite files."),
        Tool("edit", "edit", Edit, "Edit specific sections of a file using find-and-replace.",
             args={"old_text": "old_string", "new_text": "new_string"}, errors=OLD_TEXT_ERRORS),
        Tool("apply_patch", "apply_patch", ApplyPatch, "Apply unified diffs for multi-file changes."),
        Tool("grep", "grep", Grep, "Search file contents by regex pattern."),
        Tool("glob", "glob", Glob, "Find files matching a glob pattern."),
        Tool("ls", "ls", Ls, "List directory contents."),
        Tool("exec", "exec", Exec, "Execute shell commands.", args={"workdir": "working_dir",
                                                                     "timeout": ("timeout", at_least(10))},
             not_offered_args={"env": "runner's exec takes no environment: set variables in the command (K=V cmd)"}),
        Tool("process", "process", Process, "Monitor and control background processes started by exec.",
             args={"process_id": ("pid", to_int), "input": "data"}),
        Tool("memory_search", "memory_search", MemorySearch, "Search over MEMORY.md and memory fragments."),
        Tool("memory_get", "memory_get", MemoryGet, "Read a specific snippet from a memory file.",
             args={"from_": "from"}),
    ),
    not_offered={
        "cron": "runner has no scheduler that wakes an agent",
        "message": "runner sends no messages to external channels",
        "agents_list": "runner runs tools, not agents",
        "sessions_list": "runner has no agent sessions to list",
        "sessions_history": "runner keeps no message history",
        "sessions_send": "runner has no agent sessions to message",
        "sessions_spawn": "runner spawns no sub-agents (give a sub-agent the readonly preset instead)",
        "subagents": "runner spawns no sub-agents",
        "sessions_status": "runner keeps no token usage or cost",
    },
    deviations=(
        "memory_search: a lexical (BM25) ranking, not a semantic one; scores differ from miclaw's",
        "exec: output caps are the policy's limits.output (default 30,000 characters), not 100K/10K characters",
        "ls: names only (directories end in /), no sizes",
    ),
)
