"""git_status, git_diff, git_log, git_add, git_commit, git_push, git_pull.

Each runs the git command line in the workspace (or `repo_path` inside it) and answers git's
own output; a failure answers `git_<op> error: <git's message>`. safe.directory is set in the
environment (Context.child_env) so a workspace owned by another uid works.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import List, Optional, Tuple

from . import paths
from .result import Result, ToolError, error, ok

GIT_TIMEOUT = 60.0
NETWORK_TIMEOUT = 300.0
MAX_OUTPUT = 2 * 1024 * 1024
IDENTITY = ["-c", "user.name=runner", "-c", "user.email=runner@localhost"]


def _run(ctx, op: str, argv: List[str], cwd: str, timeout: float = GIT_TIMEOUT) -> Tuple[int, str]:
    git = shutil.which("git")
    if git is None:
        raise ToolError(f"git_{op} error: git is not installed in this sandbox")
    try:
        proc = subprocess.run([git, "--no-pager", *argv], cwd=cwd, env=ctx.child_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"git_{op} error: git did not finish within {timeout:g}s") from None
    except OSError as e:
        raise ToolError(f"git_{op} error: {e.strerror or e}") from None
    out = proc.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
    if len(proc.stdout) > MAX_OUTPUT:
        out += f"\n[output cut at {MAX_OUTPUT} bytes]"
    return proc.returncode, out.rstrip("\n")


def _git(ctx, op: str, argv: List[str], cwd: str, timeout: float = GIT_TIMEOUT, empty: str = "") -> Result:
    code, out = _run(ctx, op, argv, cwd, timeout)
    if code != 0:
        return error(f"git_{op} error: {out.strip() or f'git exited with status {code}'}", exit_code=code)
    return ok(out if out.strip() else empty, exit_code=0)


def _repo(ctx, args) -> str:
    return paths.resolve_dir(ctx, args.get("repo_path") or ".", "repo_path")


def _has_identity(ctx, cwd: str) -> bool:
    name = _run(ctx, "commit", ["config", "user.name"], cwd)
    email = _run(ctx, "commit", ["config", "user.email"], cwd)
    return name[0] == 0 and bool(name[1].strip()) and email[0] == 0 and bool(email[1].strip())


def _ref(value: Optional[str], what: str) -> Optional[str]:
    if value is None or value == "":
        return None
    v = str(value).strip()
    if v.startswith("-") or any(c in v for c in " \t\n\x00"):
        raise ToolError(f"{what} {value!r} is not a valid git {what}")
    return v


def git_status(ctx, args) -> Result:
    return _git(ctx, "status", ["status"], _repo(ctx, args))


def git_diff(ctx, args) -> Result:
    cwd = _repo(ctx, args)
    argv = ["diff", "--no-color", "--no-ext-diff"]
    if args.get("staged"):
        argv.append("--cached")
    if args.get("path"):
        real = paths.resolve(ctx, args["path"])
        argv += ["--", real]
    return _git(ctx, "diff", argv, cwd, empty="(no differences)")


def git_log(ctx, args) -> Result:
    limit = int(args.get("limit") or 20)
    return _git(ctx, "log", ["log", "--no-color", f"-n{limit}", "--date=short",
                             "--pretty=format:%h %ad %an%d%n    %s"], _repo(ctx, args))


def git_add(ctx, args) -> Result:
    files = args.get("files")
    if isinstance(files, str):
        files = [files]
    if not files or not isinstance(files, list):
        return error("git_add needs files: a list of 1 to 100 paths to stage")
    cwd = _repo(ctx, args)
    reals = [paths.resolve(ctx, f) for f in files]
    res = _git(ctx, "add", ["add", "--", *reals], cwd)
    if res.is_error:
        return res
    code, status = _run(ctx, "add", ["status", "--short"], cwd)
    shown = ", ".join(paths.show(ctx, r) for r in reals)
    return ok(f"staged {shown}" + (f"\n{status}" if code == 0 and status else ""), files=len(reals))


def git_commit(ctx, args) -> Result:
    message = args.get("message")
    if not isinstance(message, str) or not message.strip():
        return error("git_commit needs a message")
    cwd = _repo(ctx, args)
    ident = [] if _has_identity(ctx, cwd) else IDENTITY
    return _git(ctx, "commit", [*ident, "commit", "-m", message], cwd)


def git_push(ctx, args) -> Result:
    remote = _ref(args.get("remote") or "origin", "remote")
    branch = _ref(args.get("branch"), "branch")
    argv = ["push", remote] + ([branch] if branch else [])
    return _git(ctx, "push", argv, _repo(ctx, args), NETWORK_TIMEOUT, empty="pushed (git printed nothing)")


def git_pull(ctx, args) -> Result:
    remote = _ref(args.get("remote") or "origin", "remote")
    branch = _ref(args.get("branch"), "branch")
    argv = ["pull", "--no-edit", remote] + ([branch] if branch else [])
    cwd = _repo(ctx, args)
    ident = [] if _has_identity(ctx, cwd) else IDENTITY
    return _git(ctx, "pull", [*ident, *argv], cwd, NETWORK_TIMEOUT)
