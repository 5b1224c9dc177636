"""Forgekeeper (seed 002, its Tool Reference): the allowlisted tools with their argument names
(`file`, `maxBytes`, `timeout_ms`, `overwrite` …), their JSON answers and their error texts.

Paths are relative to the workspace (Forgekeeper's TOOLS_FS_ROOT); what would leave it is
"Path traversal detected". The feature gates (FRONTEND_ENABLE_BASH, …) are the policy's
features and tools lists."""
from __future__ import annotations

import json
import os
from typing import Literal, Optional

from pydantic import Field

from ...results import ToolResult
from .base import (Answer, Dialect, DialectArgs, Tool, arg, const, content, json_object, meta, ms_to_s,
                   workdir)

MAX_READ_BYTES = 50 * 1024  # runner's page: read_file answers at most this many bytes
Encoding = Literal["utf8", "utf-8"]


class Echo(DialectArgs):
    text: str = Field(max_length=10_000, description="Text to echo back")


class NoArgs(DialectArgs):
    pass


class ReadFile(DialectArgs):
    file: str = Field(max_length=4096, description="File path relative to sandbox root")
    encoding: Encoding = Field("utf8", description="Text encoding")
    maxBytes: Optional[int] = Field(None, ge=1, description=f"Maximum bytes to read (default and at most "
                                                            f"{MAX_READ_BYTES})")


class ReadDir(DialectArgs):
    path: str = Field(".", max_length=4096, description="Directory path relative to sandbox root")


class WriteFile(DialectArgs):
    file: str = Field(max_length=4096, description="File path relative to sandbox root")
    content: str = Field(description="File content (at most the policy's limits.max_write bytes)")
    overwrite: bool = Field(False, description="Allow overwrite if file exists")
    encoding: Encoding = Field("utf8", description="Text encoding")


class HttpFetch(DialectArgs):
    url: str = Field(max_length=2048, description="HTTP or HTTPS URL to fetch (GET only)")
    maxBytes: Optional[int] = Field(None, ge=1, le=10 * 1024 * 1024, description="Maximum bytes to read")
    timeout_ms: Optional[int] = Field(None, ge=1, le=300_000, description="Timeout in milliseconds")
    headers: Optional[dict[str, str]] = Field(None, description="Optional request headers (safe subset only: "
                                                                "accept, user-agent, accept-language)")


class GitDiff(DialectArgs):
    staged: bool = Field(False, description="Show staged changes (--cached) instead of unstaged")


class GitAdd(DialectArgs):
    files: list[str] = Field(min_length=1, max_length=100, description="List of file paths to stage")


class GitCommit(DialectArgs):
    message: str = Field(min_length=1, max_length=10_000, description="Commit message")


class GitRemote(DialectArgs):
    remote: str = Field("origin", max_length=256, description="Remote name")
    branch: Optional[str] = Field(None, max_length=256, description="Branch name (default: current branch)")


class RunBash(DialectArgs):
    script: str = Field(max_length=100_000, description="Bash script (non-interactive). Use && to chain commands.")
    timeout_ms: int = Field(15_000, ge=1, description="Timeout in milliseconds")
    cwd: Optional[str] = Field(None, description="Working directory")


# -- answers ------------------------------------------------------------------------------------
def _git_text(a: Answer) -> str:
    return "" if a.text == "(no output)" else a.text


def _git_stderr(a: Answer) -> str | None:
    """What git wrote to stderr (kept apart by the sandbox's agent), null when nothing."""
    return a.result.meta.get("stderr") or None


def _branch(a: Answer) -> str | None:
    """The branch named, else the current one the push or pull acted on (Forgekeeper's default)."""
    return a.args.get("branch") or a.result.meta.get("branch")


def _entries(a: Answer) -> list:
    """read_dir's JSON entries (path, type, size) as Node's Dirent fields."""
    return [{"name": os.path.basename(e["path"]), "isFile": e["type"] == "file", "isDirectory": e["type"] == "dir"}
            for e in json.loads(a.text)]


def _tool_names(a: Answer) -> list:
    return [s.name for s in a.dialect.specs(a.runner)]


def _http_answer(a: Answer) -> ToolResult:
    """An HTTP answer is an object even for a 404 (ok false); a fetch that failed is an error."""
    status = a.result.meta.get("status")
    if status is None:
        return a.result
    head, _, body = a.text.partition("\n\n")
    ctype = next((ln.split(": ", 1)[1] for ln in head.split("\n") if ln.startswith("content-type: ")), "")
    a.result = ToolResult(content=a.text, is_error=False, meta=a.result.meta)
    return json_object(url=arg("url"), finalUrl=meta("url"), ok=const(status < 400), status=const(status),
                       contentType=const(ctype), bytes=meta("bytes"), truncated=meta("truncated"),
                       text=const(body))(a)


def _stdout(a: Answer) -> str:
    """The command's stdout alone (runner's bash says `(no output)` for none: Forgekeeper's is "")."""
    return a.text if a.result.meta.get("output_chars") else ""


def _bash_answer(a: Answer) -> ToolResult:
    """{shell, stdout, stderr}, the two streams kept apart in the sandbox (bash separate_stderr),
    each cut by the policy's output caps; a non-zero exit is Forgekeeper's
    `bash error (exit N): STDERR` (stdout when stderr is empty)."""
    m = a.result.meta
    if a.result.is_error and not m.get("timed_out") and m.get("exit_code") not in (None, 0):
        out = a.text
        suffix = f"exit code: {m['exit_code']}"
        out = out[:-len(suffix)].rstrip("\n") if out.endswith(suffix) else out
        said = (m.get("stderr") or "").strip() or out.strip()
        return ToolResult(content=f"bash error (exit {m['exit_code']}): {said}", is_error=True, meta=m)
    return json_object(shell=const("/bin/bash"), stdout=_stdout, stderr=meta("stderr", ""))(a)


def _read_dir_answer(a: Answer) -> ToolResult:
    try:
        return json_object(path=arg("path"), entries=_entries)(a)
    except (ValueError, KeyError, TypeError):  # not the JSON read_dir answers: say what came back
        return a.result


REPO_PATH = "runner's git tools work on the workspace's repository (the sandbox's /workspace, Forgekeeper's default)"
TRAVERSAL = (r"^path is outside the workspace", "Path traversal detected")
ENOENT = r"^(file|directory) not found: "

DIALECT = Dialect(
    name="forgekeeper",
    seed="002_7bf06e9fb512a7e5.txt",
    invalid="{problems}",
    problems={
        "missing": "{arg} is required",
        "string_too_long": "Argument '{arg}' exceeds maximum length",
        "too_long": "Argument '{arg}' exceeds maximum of {max_length} items",
        "too_short": "{arg} is required and must not be empty",
        "literal_error": "Argument '{arg}' must be one of: {expected}",
        "int_parsing": "Argument '{arg}' must be of type integer", "int_type": "Argument '{arg}' must be of type integer",
        "bool_parsing": "Argument '{arg}' must be of type boolean", "bool_type": "Argument '{arg}' must be of type boolean",
        "string_type": "Argument '{arg}' must be of type string", "list_type": "{arg} is required and must be an array",
        "dict_type": "Argument '{arg}' must be of type object",
        "greater_than_equal": "Argument '{arg}' must be >= {ge}", "less_than_equal": "Argument '{arg}' must be <= {le}",
        "extra_forbidden": "Unknown argument '{arg}'",
    },
    tools=(
        Tool("echo", "echo", Echo, "Echo back the provided text. Useful for confirming arguments and testing.",
             missing="Missing required argument: {arg}"),
        Tool("get_time", "get_time", NoArgs, "Get the current time in ISO 8601 format (UTC)."),
        Tool("read_file", "read", ReadFile, "Read a text file under the sandbox root. Returns up to MAX_READ_BYTES "
             "unless a smaller maxBytes is provided.",
             args={"maxBytes": "max_bytes", "file": "path"}, fixed={"raw": True}, answer_only=("encoding",),
             answer=json_object(path=arg("file"), bytes=meta("bytes"), readBytes=meta("read_bytes"),
                                truncated=meta("truncated"), encoding=arg("encoding"), content=content),
             errors=(TRAVERSAL, (ENOENT, "ENOENT: no such file or directory, open '{file}'"),
                     (r" is a directory: ", "EISDIR: illegal operation on a directory, read"))),
        Tool("read_dir", "read_dir", ReadDir, "List contents of a directory under the sandbox root.",
             answer=_read_dir_answer,
             errors=(TRAVERSAL, (ENOENT, "ENOENT: no such file or directory, scandir '{path}'"),
                     (r" is a file, not a directory", "ENOTDIR: not a directory, scandir '{path}'"))),
        Tool("write_file", "write", WriteFile, "Write a file under the sandbox root. Limited to MAX_WRITE_BYTES and "
             "path must stay within TOOLS_FS_ROOT.", args={"file": "path"}, answer_only=("encoding",),
             answer=json_object(ok=const(True), path=arg("file"), bytes=meta("bytes")),
             missing="file and content are required",
             errors=(TRAVERSAL, (r"exists and overwrite is false", "file exists (set overwrite=true to replace)"),
                     (r"over the policy's largest write of (\d+) bytes", "content too large (> {0} bytes)"))),
        Tool("http_fetch", "http_fetch", HttpFetch, "Fetch a URL with GET and return up to a byte limit.",
             args={"maxBytes": "max_bytes", "timeout_ms": ("timeout", ms_to_s)}, answer=_http_answer,
             errors=((r"^only http and https URLs|^the URL names no host", "url must be an absolute http(s) URL"),
                     (r"^fetching \S+ failed: .*timed out", "timeout"),
                     (r"^fetching \S+ failed: ", "Network error: {text}"))),
        Tool("git_status", "git_status", NoArgs, "Check git repository status (modified files, branch, etc.)",
             answer=json_object(cwd=workdir, status=_git_text, stderr=_git_stderr),
             not_offered_args={"repo_path": REPO_PATH}),
        Tool("git_diff", "git_diff", GitDiff, "Show differences in git repository (unstaged or staged changes).",
             answer=json_object(cwd=workdir, diff=_git_text, stderr=_git_stderr),
             not_offered_args={"repo_path": REPO_PATH}),
        Tool("git_add", "git_add", GitAdd, "Stage files for commit.", missing="files is required and must be an array",
             answer=json_object(ok=const(True), files=arg("files"), stderr=_git_stderr)),
        Tool("git_commit", "git_commit", GitCommit, "Create a git commit with staged changes.",
             answer=json_object(ok=const(True), message=arg("message"), stderr=_git_stderr)),
        Tool("git_push", "git_push", GitRemote, "Push commits to remote repository.",
             answer=json_object(ok=const(True), remote=arg("remote"), branch=_branch, stderr=_git_stderr)),
        Tool("git_pull", "git_pull", GitRemote, "Pull changes from remote repository.",
             answer=json_object(ok=const(True), remote=arg("remote"), branch=_branch, stderr=_git_stderr)),
        Tool("run_bash", "bash", RunBash, "Run a bash script in the sandbox. Useful for quick setup and installing "
             "test deps.", args={"script": "command", "timeout_ms": ("timeout", ms_to_s)}, fixed={"separate_stderr": True},
             answer=_bash_answer),
        Tool("refresh_tools", "refresh_tools", NoArgs, "Reload tool definitions from disk.",
             answer=json_object(ok=const(True), count=lambda a: len(_tool_names(a)), tools=_tool_names)),
    ),
    not_offered={
        "write_repo_file": "runner has one root, the workspace: nothing is written outside it (write_file writes there)",
        "run_powershell": "runner's sandboxes are Linux containers without PowerShell (use run_bash)",
        "restart_frontend": "runner has no frontend server to restart",
        "create_task_card": "runner has no task board (TGT) to create cards on",
        "check_pr_status": "runner has no GitHub CLI body; a policy can route `gh pr view` to the host through "
                           "host_commands and run_bash",
    },
    deviations=(
        "run_bash: stdout and stderr are each cut head and tail by the policy's limits.output (default 30,000 "
        "characters / 256 lines) with runner's notice, where Forgekeeper fails past a 4 MB buffer",
        "read_file/write_file: encoding utf8 only; read_file answers at most 51200 bytes (MAX_READ_BYTES)",
        "rate limits, timeouts, size limits, redaction and audit are the policy's (limits, rate_limits, audit)",
    ),
)
