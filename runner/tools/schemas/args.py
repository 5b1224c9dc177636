"""One pydantic model per built-in tool. Canonical names in the schema; the spellings agents
already send are accepted as aliases; numbers that arrive as strings are coerced."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator


def _no_nul(v: str) -> str:
    if "\x00" in v:
        raise ValueError("must not contain NUL bytes")
    return v


PathStr = Annotated[str, AfterValidator(_no_nul)]


def _not_option(v: str) -> str:
    """A word git takes as a remote, branch or ref: never an option (`--upload-pack=…` runs a program)."""
    _no_nul(v)
    if not v.strip():
        raise ValueError("must not be empty")
    if v.startswith("-"):
        raise ValueError("must not start with '-' (git would read it as an option)")
    return v


GitWord = Annotated[str, AfterValidator(_not_option)]


def A(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False, defer_build=True)


PATH = Field(description="file path, relative to the workspace", validation_alias=A("path", "file_path", "filePath", "file"))


class Read(Args):
    path: PathStr = PATH
    offset: Optional[int] = Field(None, ge=1, description="1-based first line (default 1)")
    limit: Optional[int] = Field(None, ge=1, description="lines to show (default: a page of 2000 lines / 50 KiB)")
    raw: bool = Field(False, description="the text as it is (no line numbers), its first max_bytes bytes")
    max_bytes: Optional[int] = Field(None, ge=1, description="with raw: the most bytes to answer (default and at "
                                     "most 51200)", validation_alias=A("max_bytes", "maxBytes"))


class Write(Args):
    path: PathStr = PATH
    content: str = Field(description="the whole new content of the file")
    overwrite: bool = Field(True, description="replace an existing file (false: refuse when the file exists)")


class EditItem(Args):
    old_string: str = Field(validation_alias=A("old_string", "old_text", "oldText", "old_str", "oldString"))
    new_string: str = Field(validation_alias=A("new_string", "new_text", "newText", "new_str", "newString"))
    replace_all: bool = Field(False, validation_alias=A("replace_all", "replaceAll"))


class Edit(Args):
    path: PathStr = PATH
    old_string: Optional[str] = Field(None, description="exact text to replace (unique unless replace_all)",
                                      validation_alias=A("old_string", "old_text", "oldText", "old_str", "oldString"))
    new_string: Optional[str] = Field(None, description="replacement text",
                                      validation_alias=A("new_string", "new_text", "newText", "new_str", "newString"))
    replace_all: bool = Field(False, description="replace every occurrence", validation_alias=A("replace_all", "replaceAll"))
    edits: Optional[list[EditItem]] = Field(None, description="several edits applied in order, all or nothing")

    @model_validator(mode="after")
    def _one_form(self) -> "Edit":
        if self.edits is None and (self.old_string is None or self.new_string is None):
            raise ValueError("give old_string and new_string, or edits: [{old_string, new_string}, ...]")
        if self.edits is not None and self.old_string is not None:
            raise ValueError("give either old_string/new_string or edits, not both")
        if self.edits is not None and not self.edits:
            raise ValueError("edits is empty")
        return self


class ApplyPatch(Args):
    patch: str = Field(description="'*** Begin Patch' … '*** End Patch' envelope, or a unified diff",
                       validation_alias=A("patch", "input", "diff"))


class Ls(Args):
    path: PathStr = Field(".", description="directory (default: the workspace)", validation_alias=A("path", "dir", "directory"))
    depth: int = Field(1, ge=1, le=5, description="levels to descend, 1-5")
    show_hidden: bool = Field(False, validation_alias=A("show_hidden", "showHidden", "all"))


class ReadDir(Args):
    path: PathStr = Field(".", validation_alias=A("path", "dir", "directory"))
    show_hidden: bool = Field(True, validation_alias=A("show_hidden", "showHidden", "all"))


class Glob(Args):
    pattern: str = Field(description="glob with ** for any depth, e.g. src/**/*.py")
    path: PathStr = Field(".", description="directory to search from")


class Find(Args):
    pattern: str = Field(description="glob or substring of a file name")
    path: PathStr = Field(".")
    type: Optional[Literal["file", "dir"]] = None


class Grep(Args):
    pattern: str = Field(description="regular expression (Python syntax)", validation_alias=A("pattern", "query", "regex"))
    path: PathStr = Field(".")
    include: Optional[str] = Field(None, description="only files matching this glob", validation_alias=A("include", "glob"))
    exclude: Optional[str] = Field(None, description="skip files matching this glob")
    ignore_case: bool = Field(False, validation_alias=A("ignore_case", "ignoreCase", "case_insensitive", "i"))
    literal: bool = Field(False, description="the pattern is plain text", validation_alias=A("literal", "fixed_strings"))
    context: int = Field(0, ge=0, le=20, description="lines of context around each match", validation_alias=A("context", "C"))
    max_results: int = Field(100, ge=1, le=10_000)


class Bash(Args):
    command: str = Field(description="a bash command line", validation_alias=A("command", "cmd"))
    timeout: Optional[float] = Field(None, gt=0, description="seconds (default 120, capped by the policy)")
    cwd: Optional[PathStr] = Field(None, description="working directory in the workspace",
                               validation_alias=A("cwd", "workdir", "working_dir"))
    separate_stderr: bool = Field(False, description="keep stderr apart: the output is stdout alone, stderr comes "
                                                     "back in the result's meta (for dialects whose tools answer "
                                                     "them apart)")


class Exec(Args):
    command: str = Field(validation_alias=A("command", "cmd"))
    timeout: Optional[float] = Field(None, ge=1, le=1800, description="seconds, 1-1800")
    working_dir: Optional[PathStr] = Field(None, validation_alias=A("working_dir", "cwd", "workdir"))
    input: Optional[str] = Field(None, description="text for the command's stdin", validation_alias=A("input", "stdin"))
    background: bool = Field(False, description="start it and answer its pid at once")


class Process(Args):
    action: Literal["list", "status", "poll", "input", "signal", "kill"]
    pid: Optional[int] = None
    data: Optional[str] = Field(None, description="text to send (action input)")
    signal: Optional[str] = Field(None, description="TERM, INT, KILL, HUP, STOP, CONT, USR1, USR2 (action signal)")


class Result(Args):
    call_id: str = Field(description="the call whose kept output to read", validation_alias=A("call_id", "callId", "id"))
    offset: int = Field(1, ge=1, description="1-based first line")
    limit: int = Field(2000, ge=1, le=10_000)


class HttpFetch(Args):
    url: str
    max_bytes: int = Field(50 * 1024, ge=1, le=10 * 1024 * 1024, validation_alias=A("max_bytes", "maxBytes"))
    timeout: float = Field(30, gt=0, le=300)
    headers: dict[str, str] = Field(default_factory=dict, description="accept, user-agent, accept-language only")


class WebSearch(Args):
    query: str
    max_results: int = Field(5, ge=1, le=20)


class Empty(Args):
    pass


class GitDiff(Args):
    staged: bool = False
    path: Optional[PathStr] = None


class GitLog(Args):
    limit: int = Field(10, ge=1, le=1000)


class GitAdd(Args):
    files: list[PathStr] = Field(min_length=1, max_length=100)


class GitCommit(Args):
    message: str = Field(min_length=1)


class GitRemote(Args):
    remote: GitWord = Field("origin", description="a remote's name or URL (never an option)")
    branch: Optional[GitWord] = Field(None, description="a branch or refspec (never an option)")


class Echo(Args):
    text: str = Field(max_length=10_000)


class MemorySearch(Args):
    query: str
    max_results: int = Field(5, ge=1, le=50)
    min_score: float = 0.0


class MemoryGet(Args):
    path: PathStr
    from_: int = Field(1, ge=1, alias="from", validation_alias=A("from", "from_", "start"))
    lines: Optional[int] = Field(None, ge=1)
