"""git_status, git_diff, git_log, git_add, git_commit, git_push, git_pull: git's own output."""
from __future__ import annotations

import subprocess

from . import paths
from .context import Ctx, ToolError

GIT_TIMEOUT = 120
GIT_STDERR_MAX = 64 * 1024  # characters of git's stderr kept apart in a result's meta


# With command execution off (the controller sets `no_repo_programs`), the repository's
# configuration, written by the agent or shipped in a hostile workspace, must not make git run a
# program: no hooks, fsmonitor, editors, pagers, askpass, ssh command, proxy command, signing,
# submodule commands or auto-gc; every filter, diff, merge and credential driver it names is
# blanked, and pull/push name git's own pack programs. Command-line `-c` wins over every configuration file.
SAFE_CONFIG = (
    "core.fsmonitor=false", "core.hooksPath=/dev/null", "core.sshCommand=ssh", "core.askPass=/bin/false",
    "core.editor=:", "sequence.editor=:", "core.pager=cat", "core.alternateRefsCommand=", "credential.helper=",
    "commit.gpgSign=false", "tag.gpgSign=false", "push.gpgSign=false", "log.showSignature=false", "gc.auto=0",
    "maintenance.auto=false", "protocol.ext.allow=never", "submodule.recurse=false", "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no", "diff.external=",
)
SAFE_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_EDITOR": ":", "GIT_SEQUENCE_EDITOR": ":",
            "GIT_PAGER": "cat", "PAGER": "cat", "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false",
            "GIT_SSH_COMMAND": "ssh", "GIT_PROXY_COMMAND": "", "GIT_TERMINAL_PROMPT": "0"}
_DRIVERS = r"^(filter|diff|merge|credential)\..+\.(clean|smudge|process|command|textconv|driver|helper)$"
# remote.NAME.uploadpack/receivepack: git takes the first one given, so the command line's `-c`
# cannot override them; --upload-pack/--receive-pack with git's own programs do (PACK_PROGRAMS).
PACK_PROGRAMS = {"pull": ["--upload-pack=git-upload-pack"], "push": ["--receive-pack=git-receive-pack"]}


def _safe(ctx: Ctx) -> tuple[list, dict]:
    """(-c arguments, environment) under which git runs no program the repository names."""
    env = {k: v for k, v in ctx.env.items() if k not in ("GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_EXEC_PATH")}
    env.update(SAFE_ENV)
    pre = [x for kv in SAFE_CONFIG for x in ("-c", kv)]
    p = subprocess.run(["git", *pre, "config", "--null", "--name-only", "--get-regexp", _DRIVERS], cwd=ctx.workspace,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT)
    for key in dict.fromkeys(p.stdout.decode("utf-8", "replace").split("\0")):
        if key and "=" not in key:
            pre += ["-c", f"{key}="]
    return pre, env


def _git(ctx: Ctx, op: str, argv: list, timeout: float = GIT_TIMEOUT, args: dict | None = None) -> dict:
    """git's output as the answer; what it wrote to stderr is also in meta.stderr, apart (a
    dialect whose git tools answer the two streams apart takes it from there)."""
    pre, env = _safe(ctx) if (args or {}).get("no_repo_programs") else ([], ctx.env)
    try:
        p = subprocess.run(["git", *pre, *argv], cwd=ctx.workspace, env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise ToolError(f"git_{op} error: git is not installed in this sandbox") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"git_{op} error: timed out after {timeout:g}s") from None
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        # both streams: git says why on either (a pull's conflict is on stdout, after its fetch on stderr)
        raise ToolError(f"git_{op} error: {(err.strip() + chr(10) + out.strip()).strip()}")
    text = (out + (err if op in ("push", "pull", "commit") else "")).strip() or "(no output)"
    return {"content": text, "meta": {"stderr": err[:GIT_STDERR_MAX]}} if err.strip() else text


def _identity(ctx: Ctx) -> list:
    """-c user.name/-c user.email when the repository has no identity (a fresh sandbox)."""
    extra = []
    for key, default in (("user.name", "runner"), ("user.email", "runner@localhost")):
        p = subprocess.run(["git", "config", key], cwd=ctx.workspace, env=ctx.env, stdin=subprocess.DEVNULL,
                           capture_output=True)
        if p.returncode != 0 or not p.stdout.strip():
            extra += ["-c", f"{key}={default}"]
    return extra


def git_status(ctx: Ctx, args: dict):
    return _git(ctx, "status", ["status", "--short", "--branch"], args=args)


def git_diff(ctx: Ctx, args: dict):
    argv = ["diff", "--no-color", "--no-ext-diff"] + (["--staged"] if args.get("staged") else [])
    if args.get("no_repo_programs"):
        argv.append("--no-textconv")
    if args.get("path"):
        argv += ["--", paths.display(ctx, paths.resolve(ctx, args["path"]))]
    try:
        return _git(ctx, "diff", argv, args=args)
    except ToolError as e:
        if "--no-index" not in str(e):
            raise
    # Outside a repository git diff is `diff --no-index`, which answers its usage: git's own
    # reason instead (rev-parse fails there with it).
    _git(ctx, "diff", ["rev-parse", "--git-dir"], args=args)
    raise ToolError("git_diff error: not a git repository")


def git_log(ctx: Ctx, args: dict):
    n = max(1, min(1000, int(args.get("limit") or 10)))
    return _git(ctx, "log", ["log", f"-n{n}", "--no-color", "--format=%h %ad %an: %s", "--date=short"], args=args)


def git_add(ctx: Ctx, args: dict):
    files = args.get("files") or []
    rel = [paths.display(ctx, paths.resolve(ctx, f)) for f in files]
    done = _git(ctx, "add", ["add", "--", *rel], args=args)
    text = f"added {len(rel)} path{'s' if len(rel) != 1 else ''}: {', '.join(rel)}"
    return {"content": text, "meta": done["meta"]} if isinstance(done, dict) else text


def git_commit(ctx: Ctx, args: dict):
    msg = args.get("message")
    if not isinstance(msg, str) or not msg.strip():
        raise ToolError("git_commit error: the message is empty")
    return _git(ctx, "commit", _identity(ctx) + ["commit", "-m", msg], args=args)


def _words(op: str, args: dict) -> list:
    """[remote] or [remote, branch]; a word starting with '-' is refused: git would take it for an
    option, and `--upload-pack=`, `--receive-pack=` or `--exec=` run a program (git pull hands
    them to fetch past any `--`, so refusing is the only defence there)."""
    words = [args.get("remote") or "origin"] + ([args["branch"]] if args.get("branch") else [])
    for key, w in zip(("remote", "branch"), words, strict=False):
        if not isinstance(w, str) or w.startswith("-"):
            raise ToolError(f"git_{op} error: {key} {w!r} must not start with '-' (git would read it as an option)")
    return words


def _with_branch(ctx: Ctx, args: dict, done):
    """A push's or pull's answer, with the branch it acted on in meta.branch when none was named
    (the current one: Forgekeeper's answer names it)."""
    if args.get("branch"):
        return done
    p = subprocess.run(["git", "symbolic-ref", "--quiet", "--short", "HEAD"], cwd=ctx.workspace, env=ctx.env,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT)
    branch = p.stdout.decode("utf-8", "replace").strip() if p.returncode == 0 else ""
    if not branch:
        return done
    if isinstance(done, dict):
        return {**done, "meta": {**done["meta"], "branch": branch}}
    return {"content": done, "meta": {"branch": branch}}


def git_push(ctx: Ctx, args: dict):
    safe = PACK_PROGRAMS["push"] if args.get("no_repo_programs") else []
    done = _git(ctx, "push", ["push", *safe, "--end-of-options", *_words("push", args)], args=args)
    return _with_branch(ctx, args, done)


def git_pull(ctx: Ctx, args: dict):
    safe = PACK_PROGRAMS["pull"] if args.get("no_repo_programs") else []
    done = _git(ctx, "pull", _identity(ctx) + ["pull", "--no-rebase", *safe, *_words("pull", args)], args=args)
    return _with_branch(ctx, args, done)
