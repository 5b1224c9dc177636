"""One pydantic argument model per built-in tool.

The schema shows one canonical name per argument; the spellings agents already send are
accepted as aliases (`old_text`, `oldText`, `file_path`, `maxBytes`, …). Numbers that arrive as
strings are coerced where the schema says integer or number (pydantic's lax mode). A `null`
argument counts as absent, so its default applies. Unknown keys are refused by name: a typo
that silently did nothing would be worse than an error.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator


def arg(*names: str, **kw: Any) -> Any:
    """A field whose canonical name is names[0]; the rest are accepted aliases."""
    return Field(validation_alias=AliasChoices(*names), **kw)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _ms_to_seconds(data: Any, key: str = "timeout") -> Any:
    """`timeout_ms` / `timeoutMs` (as some agents send) becomes `timeout` in seconds."""
    if isinstance(data, dict):
        for ms_key in ("timeout_ms", "timeoutMs"):
            if ms_key in data and key not in data:
                data = dict(data)
                value = data.pop(ms_key)
                try:
                    data[key] = float(value) / 1000.0
                except (TypeError, ValueError):
                    data[key] = value
    return data


PATH = ("path", "file_path", "filePath", "file", "filename", "filepath")
PATH_DESC = "file path, relative to the workspace (absolute paths inside it work too)"


# -- files ----------------------------------------------------------------------------------
class ReadArgs(Args):
    path: str = arg(*PATH, description=PATH_DESC, min_length=1)
    offset: int = arg("offset", "start_line", "startLine", "line", default=1, ge=1,
                      description="1-based line to start at (default 1)")
    limit: Optional[int] = arg("limit", "max_lines", "lines", default=None, ge=1,
                               description="how many lines to show (a page stops at 2000 lines or 50 KiB anyway)")

    @field_validator("offset", mode="before")
    @classmethod
    def _zero_is_first(cls, v: Any) -> Any:
        return 1 if v in (0, "0") else v  # agents that count from 0 mean the first line


class WriteArgs(Args):
    path: str = arg(*PATH, description=PATH_DESC, min_length=1)
    content: str = arg("content", "contents", "text", "data", description="the whole new content of the file")


class EditItem(Args):
    old_string: str = arg("old_string", "old_text", "oldText", "old_str", "oldString",
                          description="exact text to replace (must be unique unless replace_all)")
    new_string: str = arg("new_string", "new_text", "newText", "new_str", "newString",
                          description="replacement text")
    replace_all: bool = arg("replace_all", "replaceAll", default=False, description="replace every occurrence")


class EditArgs(Args):
    path: str = arg(*PATH, description=PATH_DESC, min_length=1)
    old_string: Optional[str] = arg("old_string", "old_text", "oldText", "old_str", "oldString", default=None,
                                    description="exact text to replace; must occur once unless replace_all")
    new_string: Optional[str] = arg("new_string", "new_text", "newText", "new_str", "newString", default=None,
                                    description="replacement text")
    replace_all: bool = arg("replace_all", "replaceAll", default=False,
                            description="replace every occurrence of old_string (default false)")
    edits: Optional[list[EditItem]] = arg("edits", default=None, min_length=1, max_length=200,
                                          description="several replacements applied in order, all or nothing; "
                                                      "instead of old_string/new_string")

    @model_validator(mode="after")
    def _one_form(self) -> "EditArgs":
        if self.edits is not None:
            if self.old_string is not None or self.new_string is not None:
                raise ValueError("give either old_string/new_string or edits, not both")
        elif self.old_string is None or self.new_string is None:
            missing = [n for n in ("old_string", "new_string") if getattr(self, n) is None]
            raise ValueError("; ".join(f"{n}: Field required" for n in missing) +
                             " (give old_string and new_string, or edits: [{old_string, new_string}, …])")
        return self


class ApplyPatchArgs(Args):
    patch: str = arg("patch", "input", "diff", "patch_text", "patchText", min_length=1,
                     description="a `*** Begin Patch … *** End Patch` envelope (Add File, Delete File, Update File "
                                 "with @@ hunks and optional Move to) or a unified diff (--- a/x, +++ b/x, @@ … @@)")


class LsArgs(Args):
    path: str = arg("path", "dir", "directory", default=".", description="directory, relative to the workspace")
    depth: int = arg("depth", "max_depth", "maxDepth", default=1, ge=1, le=5,
                     description="levels to descend, 1 to 5 (default 1)")
    show_hidden: bool = arg("show_hidden", "showHidden", "all", "hidden", default=False,
                            description="include entries whose name starts with a dot")


class ReadDirArgs(LsArgs):
    pass


class GlobArgs(Args):
    pattern: str = arg("pattern", "glob", min_length=1, description="glob such as `**/*.py` or `src/*.{ts,tsx}`")
    path: str = arg("path", "dir", "directory", default=".", description="directory to search from")


class FindArgs(Args):
    pattern: str = arg("pattern", "name", "query", default="",
                       description="glob (`*_test.go`) or substring matched against names; empty: everything")
    path: str = arg("path", "dir", "directory", default=".", description="directory to search from")
    type: Optional[Literal["file", "dir"]] = arg("type", "kind", default=None,
                                                 description="file or dir (default both)")
    max_results: int = arg("max_results", "maxResults", "limit", default=200, ge=1, le=1000,
                           description="at most this many results (default 200)")

    @field_validator("type", mode="before")
    @classmethod
    def _kind(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().lower()
            return {"f": "file", "files": "file", "d": "dir", "directory": "dir", "dirs": "dir",
                    "directories": "dir", "": None, "any": None, "all": None}.get(v, v)
        return v


class GrepArgs(Args):
    pattern: str = arg("pattern", "regex", "query", min_length=1, description="Python regular expression")
    path: str = arg("path", "dir", "directory", default=".", description="file or directory to search")
    include: Optional[str] = arg("include", "glob", "file_pattern", "filePattern", default=None,
                                 description="only files whose name matches this glob (e.g. `*.py`, `*.{ts,tsx}`)")
    exclude: Optional[str] = arg("exclude", default=None, description="skip files whose name matches this glob")
    ignore_case: bool = arg("ignore_case", "ignoreCase", "case_insensitive", "i", default=False,
                            description="match regardless of case")
    literal: bool = arg("literal", "fixed_strings", "fixedStrings", default=False,
                        description="treat pattern as plain text, not a regular expression")
    context: int = arg("context", "context_lines", "contextLines", "C", default=0, ge=0, le=20,
                       description="lines of context before and after each match")
    max_results: int = arg("max_results", "maxResults", "limit", default=100, ge=1, le=5000,
                           description="stop after this many matching lines (default 100)")

    @model_validator(mode="before")
    @classmethod
    def _case_sensitive(cls, data: Any) -> Any:
        if isinstance(data, dict) and "case_sensitive" in data:
            data = dict(data)
            cs = data.pop("case_sensitive")
            if cs is not None and "ignore_case" not in data:
                if isinstance(cs, str):
                    cs = cs.strip().lower() not in ("false", "0", "no", "off")
                data["ignore_case"] = not cs
        return data


# -- processes ------------------------------------------------------------------------------
class BashArgs(Args):
    command: str = arg("command", "cmd", "script", min_length=1, description="shell command, run with bash -c")
    timeout: Optional[float] = arg("timeout", default=None, gt=0,
                                   description="seconds before the whole process tree is killed (default 120; "
                                               "capped by the policy)")
    cwd: Optional[str] = arg("cwd", "workdir", "working_dir", "workingDir", default=None,
                             description="directory to run in, inside the workspace (default: the workspace)")

    @model_validator(mode="before")
    @classmethod
    def _ms(cls, data: Any) -> Any:
        return _ms_to_seconds(data)


class ExecArgs(Args):
    command: str = arg("command", "cmd", "script", min_length=1, description="shell command, run with bash -c")
    timeout: Optional[float] = arg("timeout", default=None, ge=1, le=1800,
                                   description="seconds, 1 to 1800 (default 120 in the foreground, 1800 for a "
                                               "background job)")
    working_dir: Optional[str] = arg("working_dir", "workdir", "workingDir", "cwd", default=None,
                                     description="directory to run in, inside the workspace")
    input: Optional[str] = arg("input", "stdin", default=None, description="text given to the command's stdin")
    background: bool = arg("background", "run_in_background", "runInBackground", default=False,
                           description="start it as a background job and answer its pid at once "
                                       "(then use process)")

    @model_validator(mode="before")
    @classmethod
    def _ms(cls, data: Any) -> Any:
        return _ms_to_seconds(data)


class ProcessArgs(Args):
    action: Literal["list", "status", "poll", "input", "signal", "kill"] = arg(
        "action", description="list | status | poll | input | signal | kill")
    pid: Optional[str] = arg("pid", "process_id", "processId", "job_id", "jobId", "id", default=None,
                             description="the background job's pid, as exec answered it (not needed for list)")
    data: Optional[str] = arg("data", "input", "text", default=None, description="text to send to stdin (input)")
    eof: bool = arg("eof", "close_stdin", "closeStdin", default=False,
                    description="close the job's stdin after sending data (input)")
    signal: Optional[str] = arg("signal", "sig", default=None,
                                description="signal name or number for action signal (default TERM)")
    wait: float = arg("wait", "wait_seconds", default=0, ge=0, le=300,
                      description="poll: wait up to this many seconds for new output or the job's end")

    @field_validator("action", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("pid", "signal", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _needs_pid(self) -> "ProcessArgs":
        if self.action != "list" and not self.pid:
            raise ValueError(f"action {self.action} needs pid: the number exec answered for the background job")
        return self


# -- network --------------------------------------------------------------------------------
SAFE_HEADERS = ("accept", "user-agent", "accept-language")


class HttpFetchArgs(Args):
    url: str = arg("url", "uri", "link", min_length=1, max_length=8192, description="http:// or https:// URL")
    max_bytes: int = arg("max_bytes", "maxBytes", "max_length", default=50 * 1024, ge=1, le=10 * 1024 * 1024,
                         description="read at most this many bytes of the body (default 51200)")
    timeout: Optional[float] = arg("timeout", default=None, gt=0, le=300,
                                   description="seconds (default 30; capped by the policy)")
    headers: Optional[dict[str, str]] = arg("headers", default=None,
                                            description="request headers: accept, user-agent, accept-language only")

    @model_validator(mode="before")
    @classmethod
    def _ms(cls, data: Any) -> Any:
        return _ms_to_seconds(data)

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        v = v.strip()
        if not v.lower().startswith(("http://", "https://")):
            raise ValueError("only http:// and https:// URLs can be fetched")
        return v

    @field_validator("headers")
    @classmethod
    def _safe(cls, v: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
        if v:
            bad = sorted(k for k in v if k.lower() not in SAFE_HEADERS)
            if bad:
                raise ValueError(f"only {', '.join(SAFE_HEADERS)} may be set, not {', '.join(bad)}")
        return v


class WebFetchArgs(HttpFetchArgs):
    pass


class WebSearchArgs(Args):
    query: str = arg("query", "q", "search", min_length=1, max_length=2000, description="what to search for")
    max_results: int = arg("max_results", "maxResults", "limit", "count", default=10, ge=1, le=20,
                           description="1 to 20 results (default 10)")


# -- git ------------------------------------------------------------------------------------
REPO_DESC = "repository directory inside the workspace (default: the workspace)"


def repo_path() -> Any:
    return arg("repo_path", "repoPath", "repo", default=None, description=REPO_DESC)


class GitStatusArgs(Args):
    repo_path: Optional[str] = repo_path()


class GitDiffArgs(Args):
    staged: bool = arg("staged", "cached", default=False, description="show staged changes (git diff --cached)")
    path: Optional[str] = arg("path", "file", "file_path", default=None, description="limit the diff to this path")
    repo_path: Optional[str] = repo_path()


class GitLogArgs(Args):
    limit: int = arg("limit", "n", "max_count", "maxCount", default=20, ge=1, le=1000,
                     description="how many commits (default 20)")
    repo_path: Optional[str] = repo_path()


class GitAddArgs(Args):
    files: list[str] = arg("files", "paths", "path", min_length=1, max_length=100,
                           description="paths to stage, 1 to 100")
    repo_path: Optional[str] = repo_path()

    @field_validator("files", mode="before")
    @classmethod
    def _one(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class GitCommitArgs(Args):
    message: str = arg("message", "msg", "m", min_length=1, max_length=10_000, description="commit message")
    repo_path: Optional[str] = repo_path()


class GitRemoteArgs(Args):
    remote: str = arg("remote", default="origin", max_length=256, description="remote name (default origin)")
    branch: Optional[str] = arg("branch", default=None, max_length=256,
                                description="branch (default: the current branch's upstream)")
    repo_path: Optional[str] = repo_path()


class GitPushArgs(GitRemoteArgs):
    pass


class GitPullArgs(GitRemoteArgs):
    pass


# -- small tools ----------------------------------------------------------------------------
class EchoArgs(Args):
    text: str = arg("text", "message", max_length=10_000, description="text to echo back (at most 10,000 characters)")


class NoArgs(Args):
    pass


class GetTimeArgs(NoArgs):
    pass


class RefreshToolsArgs(NoArgs):
    pass


class MemorySearchArgs(Args):
    query: str = arg("query", "q", min_length=1, description="words to look for in MEMORY.md and memory/*.md")
    max_results: int = arg("max_results", "maxResults", "limit", default=6, ge=1, le=50,
                           description="at most this many snippets (default 6)")
    min_score: float = arg("min_score", "minScore", default=0.35, ge=0, le=1,
                           description="drop snippets scoring below this, 0 to 1 (default 0.35)")


class MemoryGetArgs(Args):
    path: str = arg("path", "file", min_length=1, description="MEMORY.md or memory/NAME.md")
    from_: int = Field(default=1, ge=1, validation_alias=AliasChoices("from", "from_", "start", "offset"),
                       serialization_alias="from", description="first line, 1-based (default 1)")
    lines: Optional[int] = arg("lines", "limit", "count", default=None, ge=1,
                               description="how many lines (default: to the end)")


class ResultArgs(Args):
    call_id: str = arg("call_id", "callId", "id", min_length=1,
                       description="the call id a truncated answer named")
    offset: int = arg("offset", default=1, ge=1, description="1-based line of the kept output to start at")
    limit: Optional[int] = arg("limit", default=None, ge=1, le=10_000,
                               description="how many lines (default 2000)")

    @field_validator("call_id", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v
