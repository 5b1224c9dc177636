"""The `runner` command line. Heavy modules are imported inside commands, so --help is instant.

No `from __future__ import annotations` here: typer reads every command's annotations at each
start, and string annotations cost an eval each (about a third of building the command tree)."""
import os
from typing import List, Optional

# Plain click formatting: rich costs ~100 ms of start-up for coloured help.
os.environ.setdefault("TYPER_USE_RICH", "0")

import typer  # noqa: E402

app = typer.Typer(
    name="runner", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Run AI agents' tools, and any command, inside ephemeral hardened containers.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
images_app = typer.Typer(no_args_is_help=True, help="Build and list the sandbox images (built offline).")
app.add_typer(images_app, name="images")
policy_app = typer.Typer(no_args_is_help=True, help="Show and check policies (presets in policies/, or YAML files).")
app.add_typer(policy_app, name="policy")
audit_app = typer.Typer(no_args_is_help=True, help="Read the audit log: one JSON line per tool call.")
app.add_typer(audit_app, name="audit")


def fail(message: str, code: int = 1) -> "typer.Exit":
    from .printable import printable

    typer.echo(printable(f"runner: {message}"), err=True)
    return typer.Exit(code)


def guarded(fn, *args, **kw):
    """Call fn; turn every expected error into one line on stderr and an exit code."""
    import sys

    from executors.errors import ExecutorError, InvalidConfig

    from .errors import RunnerError, UsageError
    from .interrupts import handled

    try:
        with handled():  # SIGINT, SIGTERM, SIGHUP: clean up, then exit 128 + the signal's number
            return fn(*args, **kw)
    except UsageError as e:
        raise fail(str(e), 2) from None
    except InvalidConfig as e:
        raise fail(str(e), 2) from None
    except (ExecutorError, RunnerError) as e:
        raise fail(str(e), getattr(e, "exit_code", 1)) from None
    except KeyboardInterrupt as e:  # Interrupted, or a plain Ctrl-C outside handled()
        raise fail(str(e) if e.args else "interrupted", getattr(e, "exit_code", 130)) from None
    except Exception as e:  # a policy or docker API error, or a bug: still one line, never a traceback
        loader = sys.modules.get("runner.policy.loader")  # loaded only by commands that read policies
        if loader is not None and isinstance(e, loader.PolicyError):
            raise fail(str(e), 2) from None
        import docker.errors

        if isinstance(e, docker.errors.APIError):
            raise fail(f"the Docker engine refused: {e.explanation or e}") from None
        raise fail(f"{type(e).__name__}: {e}") from None


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_(
    cmd: List[str] = typer.Argument(None, help="the command and its arguments, after --"),
    image: Optional[str] = typer.Option(None, "--image", "-i", help="image to run (never pulled; default runner/base)"),
    timeout: Optional[float] = typer.Option(None, help="seconds; then the whole process tree is killed (exit 124)"),
    memory: Optional[str] = typer.Option(None, help="memory limit, memory+swap equal (default 512m)"),
    cpus: Optional[float] = typer.Option(None, help="CPU share (default 1)"),
    pids: Optional[int] = typer.Option(None, help="largest number of processes (default 256)"),
    network: str = typer.Option("none", help="none (default) or bridge"),
    mount: List[str] = typer.Option([], "--mount", "-v", help="SRC:DST[:ro], repeatable"),
    env: List[str] = typer.Option([], "--env", "-e", help="K=V, or K to copy it from here; repeatable"),
    workdir: Optional[str] = typer.Option(None, "--workdir", "-w", help="working directory in the container"),
    user: Optional[str] = typer.Option(None, "--user", "-u", help="user in the container (default 1000:1000)"),
    runtime: Optional[str] = typer.Option(None, help="OCI runtime, e.g. runsc for gVisor"),
    host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address: unix://, tcp:// or ssh://user@host"),
    force_unsafe_mounts: bool = typer.Option(False, "--force-unsafe-mounts", help="allow mounting /, sockets, devices, /proc, /sys, /dev or a directory holding them"),
):
    """Run CMD in a fresh hardened container, removed afterwards. The exit status is CMD's."""
    from .exec_cmd import ExecOptions, run

    opts = ExecOptions(cmd=list(cmd or []), image=image, timeout=timeout, memory=memory, cpus=cpus, pids=pids,
                       network=network, mounts=mount, env=env, workdir=workdir, user=user, runtime=runtime,
                       host=host, force_unsafe_mounts=force_unsafe_mounts)
    raise typer.Exit(guarded(run, opts))


WORKSPACE_HELP = "the workspace directory (default: the current directory)"


@app.command()
def tools(
    preset: Optional[str] = typer.Option(None, help="show a preset instead of what the policy allows"),
    format: str = typer.Option("table", "--format", "-f", help="table, json, openai, anthropic or mcp"),
    prompt: bool = typer.Option(False, "--prompt", help="print the tools' guidance as one prompt block"),
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
):
    """List the tools and their schemas."""
    from .toolcli import tools as do_tools

    typer.echo(guarded(do_tools, preset, format, prompt, workspace, executor, policy))


@app.command()
def call(
    tool: str = typer.Argument(..., help="tool name, e.g. read"),
    args: str = typer.Argument("{}", help="the arguments as a JSON object"),
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker (default) or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    protect: List[str] = typer.Option([], "--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
):
    """Run one tool call; print its ToolResult as JSON. Exit 0, 1 if is_error, 2 on a usage error."""
    from .toolcli import call as do_call

    raise typer.Exit(guarded(do_call, tool, args, workspace, executor, policy, protect))


@app.command()
def session(
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker (default) or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    protect: List[str] = typer.Option([], "--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
):
    """JSON lines: one call {"id", "tool", "args"} per line on stdin, one result per line on stdout."""
    from .toolcli import session as do_session

    raise typer.Exit(guarded(do_session, workspace, executor, policy, protect))


@app.command()
def mcp(
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker (default) or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    protect: List[str] = typer.Option([], "--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
    http: bool = typer.Option(False, "--http", help="serve streamable HTTP instead of stdio"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (--http)"),
    port: int = typer.Option(8765, "--port", help="port to listen on (--http; 0 picks a free one)"),
    idle_timeout: float = typer.Option(1800.0, "--idle-timeout", help="seconds after which an idle HTTP session and its sandbox are removed"),
    max_sessions: int = typer.Option(32, "--max-sessions", help="HTTP sessions (so sandboxes) at once; more are refused"),
):
    """An MCP server (stdio, or streamable HTTP with --http) serving the policy's tools; one sandbox per MCP session."""
    try:
        from .mcp_server import Options, serve_http, serve_stdio
    except ImportError as e:
        raise fail(f"runner mcp needs the MCP SDK ({e}): pip install 'runner[mcp]'") from None

    opts = Options(workspace=workspace, executor=executor, policy=policy, protect=list(protect), idle_timeout=idle_timeout,
                   max_sessions=max_sessions)
    raise typer.Exit(guarded(serve_http, opts, host, port) if http else guarded(serve_stdio, opts))


@policy_app.command("show")
def policy_show(
    name: str = typer.Argument("default", help="preset name or YAML file"),
    protect: List[str] = typer.Option([], "--protect", help="add a protected directory; repeatable"),
):
    """Print the effective policy (after --protect and RUNNER_PROTECT_DIRS); secrets never shown."""
    from .policy import show

    typer.echo(guarded(show, name, protect=protect), nl=False)


@policy_app.command("check")
def policy_check(file: str = typer.Argument(..., help="policy YAML file or preset name")):
    """Exit 0 if the policy is valid; otherwise print each problem as FILE:LINE: path: message."""
    from .policy import check
    from .printable import printable

    problems = guarded(check, file)
    for p in problems:
        typer.echo(printable(p), err=True)
    if not problems:
        typer.echo(f"{file}: ok")
    raise typer.Exit(1 if problems else 0)


@audit_app.command("tail")
def audit_tail(n: int = typer.Option(20, "-n", help="how many records"),
               json_out: bool = typer.Option(False, "--json", help="raw JSON lines")):
    """The newest records of the audit log."""
    from .audit import AuditLog, format_record
    from .printable import json_text

    for rec in guarded(lambda: AuditLog().tail(n)):
        typer.echo(json_text(rec) if json_out else format_record(rec))


@audit_app.command("show")
def audit_show(call_id: str = typer.Argument(..., help="a call id, e.g. c3")):
    """Every record of one call id (ids repeat across sessions: each record names its session)."""
    from .audit import AuditLog
    from .printable import json_text

    recs = guarded(lambda: AuditLog().show(call_id))
    if not recs:
        raise fail(f"no audit record with call id {call_id}")
    for rec in recs:
        typer.echo(json_text(rec, indent=2))


@app.command("host-shell")
def host_shell(
    allow: str = typer.Option(..., "--allow", help="commands allowed: git:push,git:pull,gh:pr:list (NAME[:ARG...])"),
    root: Optional[str] = typer.Option(None, "--root", help="requests' working directories must resolve inside it"),
    command: Optional[str] = typer.Option(None, "--command", help="the command line; default $SSH_ORIGINAL_COMMAND"),
):
    """Forced command for authorized_keys: run SSH_ORIGINAL_COMMAND only if allowed, with exec, never a shell."""
    from .hostshell import main as host_main

    raise typer.Exit(host_main(allow, root, command))


@images_app.command("build")
def images_build(
    name: Optional[str] = typer.Argument(None, help="one image (base, runner/base); default: all"),
    force: bool = typer.Option(False, help="rebuild even if present and current"),
    host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address"),
):
    """Build the images that are missing or whose recipe changed; do nothing otherwise."""
    from executors.docker.engine import connect

    from . import images

    def go():
        try:
            images.resolve(name) if name else None
        except KeyError as e:
            from .errors import UsageError

            raise UsageError(e.args[0]) from None
        return images.build(connect(host), name, force=force)

    guarded(go)


@images_app.command("list")
def images_list(host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address")):
    """Show runner's images and whether they are built and current."""
    from executors.docker.engine import connect

    from . import images

    rows = guarded(lambda: images.listing(connect(host)))
    typer.echo(f"{'IMAGE':28} {'STATE':8} {'ID':14} {'SIZE':>7}  DESCRIPTION")
    for r in rows:
        size = f"{r['size_mb']}MB" if r["size_mb"] else "-"
        typer.echo(f"{r['name']:28} {r['state']:8} {r['id'] or '-':14} {size:>7}  {r['description']}")


@app.command()
def gc(
    dry_run: bool = typer.Option(False, "--dry-run", help="only say what would be removed"),
    host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address"),
):
    """Remove runner's containers whose owner is gone or whose expiry has passed."""
    from .maintenance import gc as do_gc

    from .printable import printable

    removed = guarded(do_gc, host, dry_run)
    verb = "would remove" if dry_run else "removed"
    for cid, name, reason in removed:  # labels may hold a caller's session name
        typer.echo(printable(f"{verb} {cid} ({name}): {reason}"))
    typer.echo(f"{verb} {len(removed)} container(s)")


@app.command()
def doctor(host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address")):
    """Check the engine, images and runtimes, and say what to fix."""
    from .maintenance import doctor as do_doctor

    from .printable import printable

    ok = True
    for status, what, detail in guarded(do_doctor, host):
        ok &= status != "FAIL"
        typer.echo(printable(f"[{status:4}] {what}: {detail}"))
    raise typer.Exit(0 if ok else 1)


def main() -> None:
    app(prog_name="runner")


if __name__ == "__main__":
    main()
