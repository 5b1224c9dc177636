"""git_status, git_diff, git_log, git_add, git_commit, git_push, git_pull: git's own output."""
from __future__ import annotations

import subprocess

from . import paths
from .context import Ctx, ToolError

GIT_TIMEOUT = 120


def _git(ctx: Ctx, op: str, argv: list, timeout: float = GIT_TIMEOUT) -> str:
    try:
        p = subprocess.run(["git", *argv], cwd=ctx.workspace, env=ctx.env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise ToolError(f"git_{op} error: git is not installed in this sandbox")
    except subprocess.TimeoutExpired:
        raise ToolError(f"git_{op} error: timed out after {timeout:g}s")
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise ToolError(f"git_{op} error: {(err or out).strip()}")
    return (out + (err if op in ("push", "pull", "commit") else "")).strip() or "(no output)"


def _identity(ctx: Ctx) -> list:
    """-c user.name/-c user.email when the repository has no identity (a fresh sandbox)."""
    extra = []
    for key, default in (("user.name", "runner"), ("user.email", "runner@localhost")):
        p = subprocess.run(["git", "config", key], cwd=ctx.workspace, env=ctx.env, capture_output=True)
        if p.returncode != 0 or not p.stdout.strip():
            extra += ["-c", f"{key}={default}"]
    return extra


def git_status(ctx: Ctx, args: dict):
    return _git(ctx, "status", ["status", "--short", "--branch"])


def git_diff(ctx: Ctx, args: dict):
    argv = ["diff", "--no-color"] + (["--staged"] if args.get("staged") else [])
    if args.get("path"):
        argv += ["--", paths.display(ctx, paths.resolve(ctx, args["path"]))]
    return _git(ctx, "diff", argv)


def git_log(ctx: Ctx, args: dict):
    n = max(1, min(1000, int(args.get("limit") or 10)))
    return _git(ctx, "log", ["log", f"-n{n}", "--no-color", "--format=%h %ad %an: %s", "--date=short"])


def git_add(ctx: Ctx, args: dict):
    files = args.get("files") or []
    rel = [paths.display(ctx, paths.resolve(ctx, f)) for f in files]
    _git(ctx, "add", ["add", "--", *rel])
    return f"added {len(rel)} path{'s' if len(rel) != 1 else ''}: {', '.join(rel)}"


def git_commit(ctx: Ctx, args: dict):
    msg = args.get("message")
    if not isinstance(msg, str) or not msg.strip():
        raise ToolError("git_commit error: the message is empty")
    return _git(ctx, "commit", _identity(ctx) + ["commit", "-m", msg])


def _words(op: str, args: dict) -> list:
    """[remote] or [remote, branch]; a word starting with '-' is refused: git would take it for an
    option, and `--upload-pack=`, `--receive-pack=` or `--exec=` run a program (git pull hands
    them to fetch past any `--`, so refusing is the only defence there)."""
    words = [args.get("remote") or "origin"] + ([args["branch"]] if args.get("branch") else [])
    for key, w in zip(("remote", "branch"), words):
        if not isinstance(w, str) or w.startswith("-"):
            raise ToolError(f"git_{op} error: {key} {w!r} must not start with '-' (git would read it as an option)")
    return words


def git_push(ctx: Ctx, args: dict):
    return _git(ctx, "push", ["push", "--end-of-options", *_words("push", args)])


def git_pull(ctx: Ctx, args: dict):
    return _git(ctx, "pull", _identity(ctx) + ["pull", "--no-rebase", *_words("pull", args)])
