"""Every tool example in the seed documents, replayed through its dialect against the docker
executor: the documented request (parsed from the document's example block by seeddocs, never
retyped), on a workspace set up so that the documented answer is the right one (the set-up is
derived from that answer where the answer says what the workspace holds), answers with the
documented shape: the same keys, types and nesting, the same values where they do not depend on
the machine, and each "common error" the document lists in the document's words.

What cannot hold here is in CANNOT (tool or error text -> why), and in the dialect's page under
docs/dialects/; a test fails when a document has an example or an error that is neither replayed
nor listed there, so none is skipped by accident."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from runner import Runner
from runner.tools import dialects

from . import seeddocs
from .seeddocs import NONE

pytestmark = pytest.mark.usefixtures("no_leaks")

GIT = "git -c user.name=seed -c user.email=seed@localhost"
CLEAN = "find . -mindepth 1 -delete"


def documented(got: str, doc: str) -> bool:
    """An error text in the document's words: the same text, or it followed by detail (the path
    Node's ENOENT names), numbers aside (an exit code, a byte limit the document writes N); or,
    for a `PREFIX: words` text, the same prefix and those words in git's or bash's own message."""
    def norm(s: str) -> str:
        return re.sub(r"\d+", "N", s.replace("`", "")).lower()

    g, d = norm(got), norm(doc)
    if g == d or g.startswith(d):
        return True
    head, sep, tail = d.rpartition(": ")
    return bool(sep) and g.startswith(head + ":") and tail in g


def same_shape(got, doc, where: str = "answer", nullable: bool = False) -> None:
    """got has doc's shape: the same keys, nesting and JSON types (a list: each item shaped as
    the document's first). nullable: the document's null stands for "string or null" (stderr)."""
    if isinstance(doc, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not an object"
        assert set(got) == set(doc), f"{where}: keys {sorted(got)}, the document's {sorted(doc)}"
        for k in doc:
            same_shape(got[k], doc[k], f"{where}.{k}", nullable=nullable or k == "stderr")
    elif isinstance(doc, list):
        assert isinstance(got, list), f"{where}: {got!r} is not a list"
        for i, item in enumerate(got):
            if doc:
                same_shape(item, doc[0], f"{where}[{i}]")
    elif doc is None:
        assert got is None or (nullable and isinstance(got, str)), f"{where}: {got!r}, the document: null"
    else:
        assert type(got) is type(doc), f"{where}: {got!r} ({type(got).__name__}), the document: {doc!r}"


# -- Forgekeeper (002): twelve request/response pairs, the rest request and Returns ---------------
FK = seeddocs.parse("forgekeeper")

# Values of a documented response that depend on the machine or stand for one: compared by type.
FK_MACHINE = {
    "get_time": {"": "the time of the call"},
    "read_file": {"content": "\"First 1024 bytes of content...\" stands for the file's first 1024 bytes"},
    "git_status": {"cwd": "the repository's path (the sandbox's /workspace)"},
    "run_bash": {"stdout": "ls -la's sizes, owners and dates"},
    "refresh_tools": {"count": "the tools this policy allows (the document's 19 is Forgekeeper's allowlist)",
                      "tools": "the same; the document's names are checked to be among them"},
    "http_fetch": {},
}
# Examples and errors that cannot hold here, and why (also in docs/dialects/forgekeeper.md).
FK_CANNOT = {
    "http_fetch": "the example fetches api.github.com; tests reach only loopback and containers they start, "
                  "so the request is checked as far as the URL check and the answer's object is built from "
                  "a native answer (test_tables.py::test_forgekeeper_http_fetch_answer_from_the_native_one)",
    "HTTP fetch disabled (set FRONTEND_ENABLE_HTTP_FETCH=1)": "the gate is the policy's (features.network, "
    "tools.deny): its refusal names the policy, not Forgekeeper's environment variable",
    "Network error": "the sandbox's network is off by default (network mode none): the refusal says so, as the "
    "gate's does; with a network, a failed fetch answers 'Network error: …' (the dialect's errors table)",
    "timeout": "needs a server that never answers, reachable from the sandbox",
    "git_status error: git command not found": "the sandbox image has git",
    "git_diff error: timeout": "needs a diff slower than the git timeout (120 s)",
    "git_commit error: please tell me who you are": "runner commits as runner <runner@localhost> when the "
    "repository names no identity, so a fresh sandbox can commit",
    "git_push error: authentication failed": "needs a remote that asks for credentials (tests reach no such host)",
    "git_pull error: authentication failed": "needs a remote that asks for credentials (tests reach no such host)",
    "git_pull error: no tracking information": "runner always names the remote (origin by default, as the "
    "document says), so git answers that no branch was named, not that there is no tracking information",
    "Bash tool disabled (set FRONTEND_ENABLE_BASH=1 to enable)": "the gate is the policy's (features.bash, "
    "tools.deny): its refusal names the policy, not Forgekeeper's environment variable",
    "/bin/bash not found": "the sandbox image has bash",
}


def _status_setup(status: str) -> str:
    """A repository whose `git status --short --branch` is the documented one: its branch
    tracking the documented upstream, the documented files modified."""
    first, *rest = status.split("\n")
    branch, upstream = re.fullmatch(r"## (\S+)\.\.\.(\S+)", first).groups()
    remote = upstream.split("/", 1)[0]
    files = [ln[3:] for ln in rest if ln.startswith(" M ")]
    assert len(files) == len(rest), f"a status line other than a modified file: {rest}"
    mk = " && ".join(f"mkdir -p $(dirname {shlex.quote(f)}) && echo a > {shlex.quote(f)}" for f in files)
    change = " && ".join(f"echo b >> {shlex.quote(f)}" for f in files)
    return (f"{GIT} init -q --bare /tmp/{remote}.git && {GIT} init -q -b {shlex.quote(branch)} . && "
            f"{GIT} remote add {remote} /tmp/{remote}.git && {mk} && {GIT} add -A && {GIT} commit -qm one && "
            f"{GIT} push -q -u {remote} {shlex.quote(branch)} && {change}")


def _repo(files=("README.md",), staged=False, commit=True, remote=None, branch="main") -> str:
    mk = " && ".join(f"mkdir -p $(dirname {shlex.quote(f)}) && echo a > {shlex.quote(f)}" for f in files)
    out = f"{GIT} init -q -b {branch} . && {mk}"
    if commit:
        out += f" && {GIT} add -A && {GIT} commit -qm one"
    if remote:
        out += (f" && {GIT} init -q --bare /tmp/{remote}.git && {GIT} remote add {remote} /tmp/{remote}.git && "
                f"{GIT} push -q -u {remote} {branch}")
    if staged:
        out += f" && echo b >> {shlex.quote(files[0])} && {GIT} add -A"
    return out


def fk_setup(tool: str, args: dict, response) -> str:
    """The shell set-up under which the documented answer is the right one, taken from the
    documented answer (or the request) where it says what the workspace holds."""
    if tool == "read_file":
        return f"head -c {response['bytes']} /dev/zero | tr '\\0' x > {shlex.quote(args['file'])}"
    if tool == "read_dir":
        return " && ".join(f"mkdir -p {shlex.quote(response['path'] + '/' + e['name'])}" if e["isDirectory"] else
                           f"mkdir -p {shlex.quote(response['path'])} && : > {shlex.quote(response['path'] + '/' + e['name'])}"
                           for e in response["entries"])
    if tool == "git_status":
        return _status_setup(response["status"])
    if tool == "git_diff":
        return _repo(staged=args.get("staged", False))
    if tool == "git_add":
        return _repo(files=tuple(args["files"]), commit=False)
    if tool == "git_commit":
        return _repo(commit=False) + f" && {GIT} add -A"
    if tool in ("git_push", "git_pull"):
        return _repo(remote=args.get("remote", "origin"), branch=args.get("branch") or "main")
    if tool == "run_bash":  # the files whose ls -la lines the document shows
        names = re.findall(r" (\S+)$", response["stdout"], flags=re.M)
        return " && ".join(f": > {shlex.quote(n)}" for n in names)
    return ""


@pytest.fixture
def fk(tmp_path):
    (tmp_path / "ws").mkdir()
    with Runner(executor="docker", workspace=tmp_path / "ws", preset="all", dialect="forgekeeper") as r:
        yield r


def _sh(runner: Runner, script: str) -> None:
    if script:
        res = runner.call("run_bash", {"script": f"{CLEAN} && {script}", "timeout_ms": 60_000})
        assert not res.is_error, f"set-up failed: {res.content}"


FK_EXAMPLES = [t for t in FK.values() if t.examples]


@pytest.mark.parametrize("tool", FK_EXAMPLES, ids=lambda t: t.name)
def test_forgekeeper_example(fk, tool):
    (ex,) = tool.examples
    if tool.name in fk.dialect.not_offered:
        res = fk.call(tool.name, ex.args)
        assert res.is_error and res.content == (f"{tool.name} is not offered by runner's forgekeeper dialect: "
                                                f"{fk.dialect.not_offered[tool.name]}")
        return
    if tool.name in FK_CANNOT:
        res = fk.call(tool.name, ex.args)  # sent as documented: refused by the network rules, in their words
        assert res.is_error and "api.github.com" in res.content, res.content
        return
    response = ex.response if ex.response is not NONE else tool.returns
    _sh(fk, fk_setup(tool.name, ex.args, response))
    res = fk.call(tool.name, ex.args)
    assert not res.is_error, res.content
    got = json.loads(res.content) if isinstance(response, (dict, list)) else res.content
    same_shape(got, response)
    machine = FK_MACHINE.get(tool.name, {})
    if "" in machine:
        return
    if not isinstance(response, dict):
        assert got == response, f"{tool.name}: {got!r}, the document: {response!r}"
        return
    if ex.response is NONE:  # a Returns block only: its values are examples; those the call names must echo it
        for key, value in got.items():
            if key in ex.args:
                assert value == ex.args[key], f"{tool.name}.{key}: {value!r}, the call said {ex.args[key]!r}"
            elif key == "ok":
                assert value is True
        return
    for key, doc in response.items():
        if key in machine:
            continue
        if tool.name == "read_dir" and key == "entries":  # a directory's order is the file system's
            assert sorted(got[key], key=lambda e: e["name"]) == sorted(doc, key=lambda e: e["name"])
        else:
            assert got[key] == doc, f"{tool.name}.{key}: {got[key]!r}, the document: {doc!r}"
    if tool.name == "refresh_tools":
        assert set(response["tools"]) <= set(got["tools"]) and got["count"] == len(got["tools"])
    if tool.name == "run_bash":  # the lines are ls's, for the files the document shows
        assert set(re.findall(r" (\S+)$", got["stdout"], flags=re.M)) == set(
            re.findall(r" (\S+)$", response["stdout"], flags=re.M)), got["stdout"]


# Each common error, provoked: (the call, the set-up). Derived from the tool's example where it can be.
def fk_trigger(tool: str, error: str):
    ex = FK[tool].examples[0].args
    required = [n for n, p in FK[tool].params.items() if p.required]
    if error.startswith("Missing required argument") or error.endswith(" is required") or error.endswith(
            " are required") or error.endswith("must be an array"):
        return {k: v for k, v in ex.items() if k not in required}, ""
    if "exceeds maximum length" in error:
        (name,) = re.findall(r"'(\w+)'", error)
        return {**ex, name: "x" * (FK[tool].params[name].max_length + 1)}, ""
    if "exceeds maximum of" in error:
        (name,) = re.findall(r"'(\w+)'", error)
        return {**ex, name: ["f"] * (FK[tool].params[name].max_length + 1)}, ""
    if error.startswith("ENOENT"):
        key = "file" if "file" in FK[tool].params else "path"
        return {**ex, key: "no-such-entry"}, ""
    if error == "Path traversal detected":
        key = "file" if "file" in FK[tool].params else "path"
        return {**ex, key: "../../etc/passwd"}, ""
    if error.startswith("content too large"):
        return {**ex, "content": "x" * (10 * 1024 * 1024 + 1)}, ""
    if error.startswith("file exists"):
        return {k: v for k, v in ex.items() if k != "overwrite"}, f": > {shlex.quote(ex['file'])}"
    if error == "url must be an absolute http(s) URL":
        return {**ex, "url": "ftp://example.invalid/"}, ""
    if error.endswith("not a git repository"):
        return ex, ""
    if "pathspec" in error:
        return {"files": re.findall(r"'([^']+)'", error)}, _repo()
    if error.endswith("nothing to commit"):
        return ex, _repo()
    if error.endswith("no upstream branch"):
        return {"remote": "origin"}, _repo() + f" && {GIT} init -q --bare /tmp/origin.git && {GIT} remote add origin /tmp/origin.git"
    if error.endswith("rejected"):  # the remote has a commit this clone has not
        return ex, (_repo(remote="origin", branch=ex["branch"]) + f" && {GIT} clone -q -b {ex['branch']} /tmp/origin.git /tmp/other && "
                    f"cd /tmp/other && echo c > c && {GIT} add c && {GIT} commit -qm c && {GIT} push -q && cd - && "
                    f"echo d > d && {GIT} add d && {GIT} commit -qm d")
    if error.endswith("merge conflict"):  # both sides changed the same line
        return ex, (_repo(remote="origin", branch=ex["branch"]) + f" && {GIT} clone -q -b {ex['branch']} /tmp/origin.git /tmp/other && "
                    f"cd /tmp/other && echo theirs > README.md && {GIT} commit -qam t && {GIT} push -q && cd - && "
                    f"echo ours > README.md && {GIT} commit -qam o")
    if error.startswith("bash error"):
        return {**ex, "script": "nosuchcommand-seed"}, ""
    raise AssertionError(f"forgekeeper {tool}: no way to provoke {error!r}: add one, or list it in FK_CANNOT")


FK_OFFERED = [t for t in FK.values() if t.name not in dialects.get("forgekeeper").not_offered]
FK_ERRORS = [(t.name, e) for t in FK_OFFERED for e in t.errors if e not in FK_CANNOT]


def test_forgekeeper_cannot_names_the_documents_own():
    """What FK_CANNOT lists is a documented example or error of an offered tool: the list cannot
    keep a case the document no longer has."""
    documented_here = {t.name for t in FK_OFFERED if t.examples} | {e for t in FK_OFFERED for e in t.errors}
    assert set(FK_CANNOT) <= documented_here, sorted(set(FK_CANNOT) - documented_here)


@pytest.mark.parametrize("tool,error", FK_ERRORS, ids=lambda x: x)
def test_forgekeeper_common_error(tool, error, tmp_path):
    args, setup = fk_trigger(tool, error)
    (tmp_path / "ws").mkdir()
    with Runner(executor="docker", workspace=tmp_path / "ws", preset="all", dialect="forgekeeper") as r:
        _sh(r, setup)
        res = r.call(tool, args)
    assert res.is_error and documented(res.content, error), f"{tool}: {res.content!r}, the document: {error!r}"


# -- shared: a fresh sandbox in a dialect, a set-up through its own shell tool ------------------
SHELL = {"ah": ("bash", "command"), "go-agent": ("bash", "command"), "miclaw": ("exec", "command"),
         "forgekeeper": ("run_bash", "script"), "acai": ("bash", "command")}


@pytest.fixture
def fresh(tmp_path):
    """fresh(dialect, **kw): a Runner in that dialect on an empty workspace, closed after the test."""
    made = []

    def make(dialect: str, **kw) -> Runner:
        ws = tmp_path / f"ws{len(made)}"
        ws.mkdir()
        r = Runner(executor="docker", workspace=ws, preset="all", dialect=dialect, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def sh(runner: Runner, script: str) -> None:
    tool, arg = SHELL[runner.dialect.name]
    res = runner.call(tool, {arg: script})
    assert not res.is_error, f"set-up failed: {res.content}"


def _lines_file(path: str, n: int) -> str:
    return f"mkdir -p $(dirname {shlex.quote(path)}) && seq -f 'line %g' 1 {n} > {shlex.quote(path)}"


# -- the Go agent SDK (003): each "Example LLM call" ---------------------------------------------
GO = seeddocs.parse("go-agent")
GO_CANNOT = {
    "web_search": "searches DuckDuckGo Lite; tests reach only loopback and containers they start (runner's "
                  "web_search uses the search endpoint the policy names; with none it says so)",
    "web_fetch": "fetches go.dev; tests reach only loopback and containers they start",
}


def go_case(tool: str, args: dict):
    """(set-up, check of the answer) under which the example's documented behaviour is the answer."""
    if tool == "read":  # a file longer than the page: lines offset..offset+limit-1 come back
        first, n = args["offset"], args["limit"]

        def check(res, ws):
            assert not res.is_error and f"line {first}\n" in res.content + "\n"
            assert f"line {first + n - 1}" in res.content and f"line {first + n}\n" not in res.content + "\n"
        return _lines_file(args["path"], first + n + 10), check
    if tool == "bash":  # the image has no Go: combined output, the exit code appended (the documented shape)
        def check(res, ws):
            assert res.is_error and "command not found" in res.content and res.content.endswith("exit code: 127")
        return "", check
    if tool == "edit":
        def check(res, ws):
            assert not res.is_error, res.content
            assert (ws / args["path"]).read_text() == f"package main\n\n{args['new_text']}\n"
        return f"printf 'package main\\n\\n%s\\n' {shlex.quote(args['old_text'])} > {shlex.quote(args['path'])}", check
    if tool == "write":
        def check(res, ws):
            assert not res.is_error and (ws / args["path"]).read_text() == args["content"]
        return "", check
    if tool == "grep":  # a match in a file the glob takes, none from one it leaves out; case-insensitive
        def check(res, ws):
            assert not res.is_error and "a.go" in res.content and "b.txt" not in res.content
            assert "func HTTPHandler" in res.content and "func lowerhandler" in res.content
            assert "// context" in res.content  # context_lines
        body = "// context\\n\\nfunc HTTPHandler() {}\\nfunc lowerhandler() {}\\n"
        return f"printf '{body}' > a.go && printf '{body}' > b.txt", check
    if tool == "find":  # files only: a directory of that name is left out
        def check(res, ws):
            assert not res.is_error and "x_test.go" in res.content and "dir_test.go" not in res.content
        return "touch x_test.go main.go && mkdir dir_test.go", check
    if tool == "ls":  # dotfiles left out by default
        def check(res, ws):
            assert not res.is_error and "loop.go" in res.content and ".hidden" not in res.content
        return f"mkdir -p {args['path']} && touch {args['path']}/loop.go {args['path']}/.hidden", check
    raise AssertionError(f"go-agent {tool}: no set-up for its example: add one, or list it in GO_CANNOT")


@pytest.mark.parametrize("tool", [t for t in GO if t not in GO_CANNOT], ids=str)
def test_go_agent_example(fresh, tool):
    (ex,) = GO[tool].examples
    setup, check = go_case(tool, ex.args)
    r = fresh("go-agent")
    if setup:
        sh(r, setup)
    check(r.call(tool, ex.args), r.workspace)


def test_go_agent_validation_error_is_the_documents(tmp_path):
    """`validation error: missing required parameter "city"`, for each tool's first required
    parameter, the others given (the dialect refuses before anything runs)."""
    template = re.search(r"```\n(validation error: .*)\n```", seeddocs.text("go-agent")).group(1)
    value = {"string": "x", "number": 1, "boolean": True}
    with Runner(executor="local", workspace=tmp_path, preset="all", dialect="go-agent") as r:
        for name, tool in GO.items():
            required = [p for p in tool.params.values() if p.required]
            if not required:
                continue
            got = r.call(name, {p.name: value[p.type] for p in required[1:]})
            assert got.is_error and got.content == template.replace('"city"', f'"{required[0].name}"'), (
                f"{name}: {got.content!r}")


def test_go_agent_truncation_notice_is_the_documents(fresh):
    """`[Output truncated at 50KB. Full output saved to: /tmp/agent-out-abc123.txt]`: the size
    and the place are runner's (its caps, the result tool); the words are the document's."""
    doc = re.search(r"```\n(\[Output truncated at .*\])\n```", seeddocs.text("go-agent")).group(1)
    pattern = re.escape(doc).replace("50KB", r"[\d.]+KB").replace(re.escape("/tmp/agent-out-abc123.txt"), ".+")
    r = fresh("go-agent")
    res = r.call("bash", {"command": "seq 1 100000"})
    assert re.search(pattern, res.content), res.content[:2000]


@pytest.mark.parametrize("error", GO["edit"].errors, ids=str)
def test_go_agent_edit_errors(fresh, error):
    r = fresh("go-agent")
    sh(r, "printf 'a\\nb\\na\\n' > f.go")
    args = {"File not found": {"path": "nope.go", "old_text": "a", "new_text": "c"},
            "`old_text` not found in file": {"path": "f.go", "old_text": "zzz", "new_text": "c"},
            "`old_text` found more than once (ambiguous)": {"path": "f.go", "old_text": "a", "new_text": "c"}}[error]
    res = r.call("edit", args)
    assert res.is_error and documented(res.content, error), res.content


# -- ah (000): its parameter lists, stated default, units and truncation table -------------------
AH = seeddocs.parse("ah")


def test_ah_parameters_as_documented(fresh):
    """Each tool called with every documented parameter, meaning what the document says:
    read's offset 1-indexed and limit in lines, write creating parent directories, edit's unique
    match, bash's timeout in milliseconds and its stdout + stderr combined."""
    assert {n: sorted(t.params) for n, t in AH.items()} == {
        "read": ["limit", "offset", "path"], "write": ["content", "path"], "edit": ["new_string", "old_string", "path"],
        "bash": ["command", "timeout"]}, "the document's parameters changed: review this test"
    r = fresh("ah")
    sh(r, _lines_file("f.txt", 10) + " && printf 'a\\nb\\na\\n' > twice.txt && printf 'x\\0y' > bin.dat")
    got = r.call("read", {"path": "f.txt", "offset": 3, "limit": 2}).content
    assert "line 3" in got and "line 4" in got and "line 2\n" not in got and "line 5" not in got, got
    assert r.call("write", {"path": "new/deep/w.txt", "content": "hi"}).is_error is False
    assert (r.workspace / "new" / "deep" / "w.txt").read_text() == "hi"
    twice = r.call("edit", {"path": "twice.txt", "old_string": "a", "new_string": "c"})
    assert twice.is_error and "found 2 times" in twice.content  # the unique match requirement
    assert not r.call("edit", {"path": "twice.txt", "old_string": "b", "new_string": "c"}).is_error
    binary = r.call("read", {"path": "bin.dat"})  # "binary files are detected ... and rejected"
    assert binary.is_error and "binary" in binary.content
    combined = r.call("bash", {"command": "echo hi; echo oops >&2"})
    assert combined.content == "hi\noops\n"  # "returns stdout + stderr combined"
    slow = r.call("bash", {"command": "sleep 5", "timeout": AH["bash"].params["timeout"].default // 240})  # 500 ms
    assert slow.is_error and slow.meta["timed_out"] and "timed out after 0.5s" in slow.content


def test_ah_bash_is_pipefail_and_errexit(fresh):
    """`/bin/bash -o pipefail -ec`: a failing stage of a pipe fails the command, and the first
    failing command stops it."""
    assert "/bin/bash -o pipefail -ec" in AH["bash"].notes
    r = fresh("ah")
    piped = r.call("bash", {"command": "false | true; echo after"})
    assert piped.is_error and "after" not in piped.content and piped.meta["exit_code"] == 1


def test_ah_truncation_table(fresh):
    """bash's row of the truncation table: head and tail kept, at most that many characters and
    lines (runner's defaults are the same numbers)."""
    chars, lines = seeddocs.ah_truncation()["bash"]
    r = fresh("ah")
    many = r.call("bash", {"command": f"seq 1 {lines + 44}"}).content
    head, _, tail = many.partition("\n[...")
    assert head.rstrip("\n").split("\n") == [str(i) for i in range(1, lines // 2 + 1)], head[-200:]
    assert tail.rstrip("\n").split("\n")[-(lines // 2):] == [str(i) for i in range(45 + lines // 2, lines + 45)]
    wide = r.call("bash", {"command": f"head -c {chars * 2} /dev/zero | tr '\\0' x"}).content
    head, _, rest = wide.partition("\n[...")
    assert head.rstrip("\n") == "x" * (chars // 2) and rest.split("...]\n", 1)[1] == "x" * (chars // 2)


def test_ah_protected_directories(fresh):
    """AH_PROTECT_DIRS: write and edit refuse protected directories (runner's protect list)."""
    r = fresh("ah", protect=["secret"])
    refused = r.call("write", {"path": "secret/x.txt", "content": "x"})
    assert refused.is_error and "protected" in refused.content and not (r.workspace / "secret" / "x.txt").exists()


# -- miclaw (004): its Go structs' parameters, stated defaults and units -------------------------
MC = seeddocs.parse("miclaw")


def test_miclaw_parameters_as_documented(fresh):
    """read's offset 0-based with line-numbered content, write, edit's unique old_text, the
    documented patch format applied as written, grep's include, glob, ls's types."""
    r = fresh("miclaw")
    sh(r, _lines_file("f.txt", 10) + " && mkdir -p src && printf 'func A()\\n' > src/a.go && printf 'func B()\\n' > b.txt")
    page = r.call("read", {"path": "f.txt", "offset": 1, "limit": 1}).content
    assert re.match(r"\s*2\tline 2\n", page) and "line 1\n" not in page, page  # 0-based, line-numbered
    assert not r.call("write", {"path": "d/e.txt", "content": "x"}).is_error and (r.workspace / "d/e.txt").read_text() == "x"
    edit = r.call("edit", {"path": "f.txt", "old_text": "line", "new_text": "row"})
    assert edit.is_error and "found more than once" in edit.content
    hits = r.call("grep", {"pattern": "func", "include": "*.go"}).content
    assert re.search(r"src/a\.go:1:func A\(\)", hits) and "b.txt" not in hits, hits
    assert r.call("glob", {"pattern": "**/*.go"}).content.strip() == "src/a.go"
    listing = r.call("ls", {"path": "."}).content.split("\n")
    assert "src/" in listing and "f.txt" in listing  # type: a directory ends in /


def test_miclaw_patch_format_block(fresh):
    """The document's own patch block, applied as written: the file it adds, the hunk it
    updates (its context line, the line it removes and the one it adds), the file it deletes."""
    block = re.search(r"Patch format:\n```\n(.*?)```", seeddocs.text("miclaw"), flags=re.S).group(1)
    add = re.search(r"^\*\*\* Add File: (\S+)$", block, flags=re.M).group(1)
    upd = re.search(r"^\*\*\* Update File: (\S+)$", block, flags=re.M).group(1)
    dele = re.search(r"^\*\*\* Delete File: (\S+)$", block, flags=re.M).group(1)
    context = re.search(r"^@@ (.*) @@$", block, flags=re.M).group(1)
    kept = [ln[1:] for ln in block.split("\n") if ln.startswith(" ")]
    removed = [ln[1:] for ln in block.split("\n") if ln.startswith("-")]
    added = [ln[1:] for ln in block.split(f"*** Update File: {upd}")[1].split("\n") if ln.startswith("+")]
    r = fresh("miclaw")
    before = "\n".join([context, *kept, *removed]) + "\n"
    sh(r, f"mkdir -p $(dirname {upd}) $(dirname {dele}) && printf %s {shlex.quote(before)} > {upd} && : > {dele}")
    res = r.call("apply_patch", {"patch": block})
    assert not res.is_error, res.content
    new_lines = [ln[1:] for ln in block.split(f"*** Add File: {add}")[1].split("***")[0].split("\n") if ln.startswith("+")]
    assert (r.workspace / add).read_text() == "\n".join(new_lines) + "\n"
    assert (r.workspace / upd).read_text() == "\n".join([context, *kept, *added]) + "\n"
    assert not (r.workspace / dele).exists()


def test_miclaw_exec_and_process(fresh):
    """exec's timeout in seconds, at least 10 (a 1 s timeout is raised: a 2 s sleep ends
    well); background yields a process id at once, and process polls, sends input and signals
    it by process_id."""
    timeout = MC["exec"].params["timeout"]
    assert timeout.unit == "s" and timeout.minimum == 10 and timeout.default == 1800
    r = fresh("miclaw")
    done = r.call("exec", {"command": "sleep 2; echo slept", "timeout": 1})
    assert not done.is_error and "slept" in done.content
    started = r.call("exec", {"command": "read line; echo got $line; sleep 60", "background": True})
    pid = re.search(r"pid (\d+)", started.content).group(1)
    assert not r.call("process", {"action": "input", "process_id": pid, "input": "hello\n"}).is_error
    for _ in range(100):
        polled = r.call("process", {"action": "poll", "process_id": pid}).content
        if "got hello" in polled:
            break
    assert "got hello" in polled and "running" in polled
    assert not r.call("process", {"action": "signal", "process_id": pid, "signal": "SIGTERM"}).is_error
    for _ in range(100):
        status = r.call("process", {"action": "status", "process_id": pid}).content
        if "exited" in status:
            break
    assert "exited" in status, status


def test_miclaw_memory_defaults(fresh):
    """memory_search answers at most max_results (default 6) ranked results, each with its
    source path, line range, score and snippet; memory_get reads `lines` lines from `from`."""
    assert MC["memory_search"].params["max_results"].default == 6
    r = fresh("miclaw")
    sh(r, "for i in 1 2 3 4 5 6 7 8 9; do printf '## n%s\\n\\ndeploy step %s\\n\\n' $i $i; done > MEMORY.md")
    found = re.findall(r"^(\S+):(\d+)-(\d+) \(score ([\d.]+)\)\n(.+)$", r.call("memory_search", {"query": "deploy"}).content,
                       flags=re.M)
    assert len(found) == 6 and all(f[0] == "MEMORY.md" and float(f[3]) >= 0.35 for f in found), found
    assert r.call("memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1}).content.strip() == "deploy step 1"


# -- acai (001): the complete example dynamic tool, as the document gives it -------------------
ACAI_CANNOT = {
    "success - all checks pass": "the example runs `npm run typecheck && npm run lint:fix && npm run format`; the "
    "sandbox image runner/node has this machine's node but no npm, so the checks cannot pass there: the example's "
    "failure branch is replayed (the checks' output as the answer, the exit code kept)",
}


def test_acai_example_tool(fresh, docker_client):
    """The document's run-all-checks.mjs, verbatim, in .acai/tools: called as
    dynamic-run-all-checks with its parameters on stdin, its `dir` defaulting to '.'; its answer
    is the checks' output with their exit code (the success text needs npm: ACAI_CANNOT)."""
    name, source = seeddocs.acai_example_tool()
    assert "console.log('success - all checks pass')" in source and set(ACAI_CANNOT) == {"success - all checks pass"}
    r = fresh("acai", image="runner/node:latest")
    tools = r.workspace / ".acai" / "tools"
    tools.mkdir(parents=True)
    (tools / name).write_text(source)
    shown = seeddocs.acai_described().name
    for args in ({"dir": "."}, {}):
        res = r.call(shown, args)
        assert res.is_error and "npm" in res.content and "not found" in res.content, res.content
        assert not res.content.startswith("success")
