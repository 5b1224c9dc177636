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
DIALECT_HELP = "present another agent system's tools: ah, acai, forgekeeper, go-agent or miclaw (default: the policy's)"


@app.command()
def tools(
    preset: Optional[str] = typer.Option(None, help="show a preset instead of what the policy allows"),
    format: str = typer.Option("table", "--format", "-f", help="table, json, openai, anthropic or mcp"),
    prompt: bool = typer.Option(False, "--prompt", help="print the tools' guidance as one prompt block"),
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    dialect: Optional[str] = typer.Option(None, "--dialect", help=DIALECT_HELP),
):
    """List the tools and their schemas."""
    from .toolcli import tools as do_tools

    typer.echo(guarded(do_tools, preset, format, prompt, workspace, executor, policy, dialect))


@app.command()
def call(
    tool: str = typer.Argument(..., help="tool name, e.g. read"),
    args: str = typer.Argument("{}", help="the arguments as a JSON object"),
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker (default) or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    protect: List[str] = typer.Option([], "--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
    dialect: Optional[str] = typer.Option(None, "--dialect", help=DIALECT_HELP),
    server: Optional[str] = typer.Option(None, "--server", help="run it on a `runner serve` at this URL (with --key), in a session of its own"),
    key: Optional[str] = typer.Option(None, "--key", envvar="RUNNER_KEY", help="the tenant's API key for --server (or $RUNNER_KEY)"),
):
    """Run one tool call; print its ToolResult as JSON. Exit 0, 1 if is_error, 2 on a usage error."""
    from .toolcli import call as do_call

    if server:
        if dialect:
            raise typer.BadParameter("a dialect is chosen by the server's policy, not with --server", param_hint="--dialect")
        from .toolcli import call_remote

        raise typer.Exit(guarded(call_remote, tool, args, server, key, policy))
    raise typer.Exit(guarded(do_call, tool, args, workspace, executor, policy, protect, dialect))


@app.command()
def session(
    workspace: str = typer.Option(".", "--workspace", "-w", help=WORKSPACE_HELP),
    executor: Optional[str] = typer.Option(None, help="docker (default) or local"),
    policy: Optional[str] = typer.Option(None, help="policy name or file"),
    protect: List[str] = typer.Option([], "--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
    dialect: Optional[str] = typer.Option(None, "--dialect", help=DIALECT_HELP),
):
    """JSON lines: one call {"id", "tool", "args"} per line on stdin, one result per line on stdout."""
    from .toolcli import session as do_session

    raise typer.Exit(guarded(do_session, workspace, executor, policy, protect, dialect))


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
    dialect: Optional[str] = typer.Option(None, "--dialect", help=DIALECT_HELP),
):
    """An MCP server (stdio, or streamable HTTP with --http) serving the policy's tools; one sandbox per MCP session."""
    try:
        from .mcp_server import Options, serve_http, serve_stdio
    except ImportError as e:
        raise fail(f"runner mcp needs the MCP SDK ({e}): pip install 'runner[mcp]'") from None

    opts = Options(workspace=workspace, executor=executor, policy=policy, protect=list(protect), idle_timeout=idle_timeout,
                   max_sessions=max_sessions, dialect=dialect)
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
    """Remove what runner left behind: containers whose owner is gone or whose expiry has passed,
    their egress networks and swarm services, and the agent-socket directories and result stores
    of controllers that were killed."""
    from .maintenance import gc_steps
    from .printable import printable

    verb = "would remove" if dry_run else "removed"
    removed = []
    for step in gc_steps(host):  # each printed as it ends: this machine's even when no engine answers
        found = guarded(step, dry_run)
        for cid, name, reason in found:  # labels may hold a caller's session name
            typer.echo(printable(f"{verb} {cid} ({name}): {reason}"))
        removed += found
    typer.echo(f"{verb} {len(removed)} orphan(s)")


@app.command()
def nodes(host: Optional[str] = typer.Option(None, "--host", "-H", help="a swarm manager's engine address"),
          as_json: bool = typer.Option(False, "--json", help="one JSON list")):
    """List the swarm's nodes (executor swarm): state, free capacity and live sandboxes."""
    import json

    from executors.docker.engine import connect
    from executors.errors import EngineUnavailable
    from executors.swarm import nodes as swarm_nodes

    from .printable import printable

    def listing():
        client = connect(host)
        if not (client.info().get("Swarm") or {}).get("ControlAvailable"):
            raise EngineUnavailable(f"the engine at {host or 'the local socket'} is no swarm manager: point -H at one")
        return swarm_nodes(client)

    rows = guarded(listing)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    typer.echo(f"{'NODE':14} {'HOST':16} {'ADDRESS':16} {'ROLE':8} {'STATE':8} {'AVAIL':7} {'CPUS FREE':>11} "
               f"{'MEMORY FREE':>17}  SANDBOXES")
    for r in rows:  # hostnames, labels and session names are the cluster's: printed safely
        typer.echo(printable(
            f"{r['id'][:12]:14} {r['hostname'][:16]:16} {r['addr'][:16]:16} {r['role']:8} {r['state']:8} "
            f"{r['availability']:7} {r['cpus_free']:5.2f}/{r['cpus']:<5.2f} "
            f"{r['memory_free'] / 2**30:7.2f}/{r['memory'] / 2**30:<7.2f}G  "
            f"{len(r['sandboxes'])}{': ' + ', '.join(r['sandboxes']) if r['sandboxes'] else ''}"))


@app.command()
def doctor(host: Optional[str] = typer.Option(None, "--host", "-H", help="engine address")):
    """Check the engine, images and runtimes, and say what to fix."""
    from .maintenance import doctor as do_doctor

    from .printable import printable

    from executors.errors import EngineUnavailable

    ok = True
    rows = guarded(do_doctor, host)
    for status, what, detail in rows:
        ok &= status != "FAIL"
        typer.echo(printable(f"[{status:4}] {what}: {detail}"))
    if rows and rows[0][:2] == ("FAIL", "engine"):  # the one line there is: no engine answers
        raise typer.Exit(EngineUnavailable.exit_code)
    raise typer.Exit(0 if ok else 1)


# -- runner serve and runner tenants (runner/serve/, the extra runner[serve]) --------------------
tenants_app = typer.Typer(no_args_is_help=True, help="The tenants of `runner serve`: keys, grants and quotas.")
app.add_typer(tenants_app, name="tenants")
DATA_HELP = "state directory (default $RUNNER_DATA, else ~/.local/share/runner); the database defaults to SQLite in it"
DB_HELP = "database URL (sqlite:///FILE or postgresql://...); default SQLite in --data"


def _serve_module(name: str):
    import importlib

    try:
        return importlib.import_module(f"runner.serve.{name}")
    except ImportError as e:
        raise fail(f"runner serve needs its libraries ({e}): pip install 'runner[serve]'") from None


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(8700, "--port", help="port to listen on (0 picks a free one)"),
    data: Optional[str] = typer.Option(None, "--data", help=DATA_HELP),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    idle_timeout: float = typer.Option(1800.0, "--idle-timeout", help="seconds after which an unused session ends"),
    max_lifetime: float = typer.Option(86400.0, "--max-lifetime", help="seconds after which any session ends"),
    max_body: int = typer.Option(16 * 1024 * 1024, "--max-body", help="largest request body in bytes (413 past it)"),
):
    """The multi-tenant HTTP service: sessions, tool calls, files and MCP at /mcp (API docs at /docs)."""
    main = _serve_module("main")
    opts = main.ServeOptions(host=host, port=port, data=data, db=db, idle_timeout=idle_timeout,
                             max_lifetime=max_lifetime, max_body=max_body)
    raise typer.Exit(guarded(main.serve, opts))


def _tenants_db(data, db):
    return _serve_module("db").open_db(data, db)


@tenants_app.command("add")
def tenants_add(
    name: str = typer.Argument(..., help="the tenant's name (a-z, 0-9, - and _)"),
    policy: List[str] = typer.Option([], "--policy", help="a policy it may use (preset or file; repeatable; the first is its default; default multi-tenant)"),
    image: List[str] = typer.Option([], "--image", help="an image it may run with POST /v1/exec (repeatable; default none)"),
    max_sessions: Optional[int] = typer.Option(None, "--max-sessions", help="open sessions at once (default 10)"),
    calls_per_minute: Optional[int] = typer.Option(None, "--calls-per-minute", help="tool calls per minute (default 600)"),
    data: Optional[str] = typer.Option(None, "--data", help=DATA_HELP),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
):
    """Add a tenant; print its API key alone on stdout (only a hash of it is kept)."""
    tenants = _serve_module("tenants")
    key = guarded(lambda: tenants.add(_tenants_db(data, db), name, list(policy), max_sessions, calls_per_minute,
                                      list(image)))
    typer.echo(f"runner: tenant {name} added; its key follows on stdout (it is not shown again)", err=True)
    typer.echo(key)


@tenants_app.command("key")
def tenants_key(
    name: str = typer.Argument(...),
    data: Optional[str] = typer.Option(None, "--data", help=DATA_HELP),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
):
    """A new API key for the tenant, alone on stdout; the old key stops working at once."""
    tenants = _serve_module("tenants")
    typer.echo(guarded(lambda: tenants.rotate(_tenants_db(data, db), name)))


@tenants_app.command("list")
def tenants_list(
    json_out: bool = typer.Option(False, "--json", help="JSON instead of a table"),
    data: Optional[str] = typer.Option(None, "--data", help=DATA_HELP),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
):
    """The tenants, their grants, quotas and open sessions."""
    import json

    rows = guarded(lambda: _serve_module("tenants").listing(_tenants_db(data, db)))
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'TENANT':20} {'SESSIONS':>8} {'MAX':>4} {'CALLS/MIN':>9}  POLICIES  IMAGES")
    for r in rows:
        typer.echo(f"{r['name']:20} {r['open_sessions']:>8} {r['max_sessions']:>4} {r['calls_per_minute']:>9}  "
                   f"{','.join(r['policies'])}  {','.join(r['images']) or '-'}")


@tenants_app.command("remove")
def tenants_remove(
    name: str = typer.Argument(...),
    data: Optional[str] = typer.Option(None, "--data", help=DATA_HELP),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
):
    """Remove the tenant: its key stops working, its sessions are closed (sandboxes and workspaces removed)."""
    closed = guarded(lambda: _serve_module("admin").remove_tenant(data, db, name))
    typer.echo(f"runner: tenant {name} removed; {closed} open session(s) closed", err=True)


def main() -> None:
    app(prog_name="runner")


if __name__ == "__main__":
    main()
