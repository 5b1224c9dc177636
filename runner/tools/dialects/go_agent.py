"""The Go agent SDK (seed 003): read, bash, edit, write, grep, find, ls, web_search, web_fetch,
with its argument names (`old_text`/`new_text`, `case_sensitive`, `context_lines` …), bash's
timeout in seconds, its validation error text and its truncation notice.

Its JSON-lines plugins are runner's custom tools of that format (policy tools.plugins)."""
from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field

from ...results import ToolResult
from .base import OLD_TEXT_ERRORS, Answer, Dialect, DialectArgs, Tool, negate


class Read(DialectArgs):
    path: str = Field(description="File path (absolute or relative to work_dir)")
    offset: Optional[int] = Field(None, ge=1, description="1-based line number to start from")
    limit: Optional[int] = Field(None, ge=1, description="Maximum number of lines to return")


class Bash(DialectArgs):
    command: str = Field(description="Shell command to run")
    timeout: float = Field(120, gt=0, description="Timeout in seconds (default: 120)")


class Edit(DialectArgs):
    path: str = Field(description="File to edit")
    old_text: str = Field(description="Exact string to find and replace")
    new_text: str = Field(description="Replacement string")


class Write(DialectArgs):
    path: str = Field(description="File to write")
    content: str = Field(description="Full file contents")


class Grep(DialectArgs):
    pattern: str = Field(description="Regular expression")
    path: Optional[str] = Field(None, description="File or directory to search (default: work_dir)")
    glob: Optional[str] = Field(None, description='File glob filter (e.g. "*.go")')
    case_sensitive: bool = Field(False, description="Default: false (case-insensitive)")
    context_lines: Optional[int] = Field(None, ge=0, le=20, description="Lines of context around each match")
    max_results: int = Field(100, ge=1, le=10_000, description="Cap on matches returned (default: 100)")


class Find(DialectArgs):
    path: Optional[str] = Field(None, description="Root directory to search (default: work_dir)")
    pattern: str = Field("*", description="Glob or substring to match against file names")
    type: Literal["file", "dir", ""] = Field("", description='"file" | "dir" | "" (both)')
    max_results: int = Field(200, ge=1, le=1000, description="Cap on results returned (default: 200)")


class Ls(DialectArgs):
    path: Optional[str] = Field(None, description="Directory to list (default: work_dir)")
    show_hidden: bool = Field(False, description="Include dotfiles (default: false)")


class WebSearch(DialectArgs):
    query: str = Field(description="Search query")
    max_results: int = Field(10, ge=1, le=20, description="Maximum results (default: 10, max: 20)")


class WebFetch(DialectArgs):
    url: str = Field(description="URL to fetch")
    max_bytes: int = Field(51_200, ge=1, le=102_400, description="Max response bytes (default: 51200, max: 102400)")


def _capped(a: Answer) -> ToolResult:
    """find's max_results: the first N results, and a note when there were more."""
    n = a.args["max_results"]
    lines = a.text.split("\n")
    if a.result.is_error or len(lines) <= n:
        return a.result
    return ToolResult(content="\n".join(lines[:n]) + f"\n[{len(lines)} results; showing the first {n}: narrow the "
                      "pattern or raise max_results]", meta=a.result.meta)


_NATIVE_NOTICE = re.compile(r"\n\[\.\.\. \d+ lines \(\d+ characters\) cut from the middle of .*? \.\.\.\]\n", re.S)


def _size(n: int) -> str:
    return f"{n / 1024:.1f}".removesuffix(".0") + "KB"


def _notice(a: Answer) -> ToolResult:
    """The SDK's `[Output truncated at 50KB. Full output saved to: …]`: runner keeps the full
    output for the result tool, so that is where it says it is."""
    call_id = a.result.meta.get("kept_as")
    caps = a.runner.policy.limits.output
    said = (f"\n[Output truncated at {_size(caps.chars)}. Full output saved to: the result tool, "
            f'{{"call_id": "{call_id}"}}; the end of the output follows]\n')
    text = _NATIVE_NOTICE.sub(lambda m: said, a.text, count=1)
    return ToolResult(content=text, is_error=a.result.is_error, meta=a.result.meta)


DIALECT = Dialect(
    name="go-agent",
    seed="003_1402d700c332f8f9.txt",
    invalid="validation error: {problems}",
    problems={"missing": 'missing required parameter "{arg}"', "extra_forbidden": 'unknown parameter "{arg}"',
              "*": 'parameter "{arg}": {msg}'},
    tools=(
        Tool("read", "read", Read, "Read a file, returning its contents as text."),
        Tool("bash", "bash", Bash, "Execute a shell command and return its combined stdout/stderr."),
        Tool("edit", "edit", Edit, "Replace an exact string in a file. The old_text must match character-for-"
             "character (including whitespace and newlines).",
             args={"old_text": "old_string", "new_text": "new_string"}, errors=OLD_TEXT_ERRORS),
        Tool("write", "write", Write, "Create a new file or completely overwrite an existing one. Parent directories "
             "are created automatically."),
        Tool("grep", "grep", Grep, "Search for a regular expression pattern across files.",
             args={"glob": "include", "case_sensitive": ("ignore_case", negate), "context_lines": "context"}),
        Tool("find", "find", Find, "Recursively find files/directories matching a pattern.",
             args={"type": ("type", lambda v: v or None)}, answer_only=("max_results",), answer=_capped),
        Tool("ls", "ls", Ls, "List directory contents."),
        Tool("web_search", "web_search", WebSearch, "Search the web through the search endpoint the policy names."),
        Tool("web_fetch", "web_fetch", WebFetch, "Fetch a URL and return its content as clean plain text."),
    ),
    notice=_notice,
    deviations=(
        "grep: Python regular expressions, not Go regexp syntax",
        "ls: names only (directories end in /), no sizes or modification times",
        "web_search: through the search endpoint the policy names (network.search_endpoint), not DuckDuckGo Lite",
        "output caps are the policy's limits.output (default 30,000 characters / 256 lines, head and tail kept)",
    ),
)
