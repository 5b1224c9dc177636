"""The `runner` command line, on the standard library's argparse (DESIGN.md, speed: why not typer).

Each command is a function of its parsed arguments that returns its exit status, and imports what
it needs inside. Only the command that runs gets a parser: `runner --help` lists the commands from
their docstrings and imports nothing, not even argparse."""
import sys

WORKSPACE_HELP = "the workspace directory (default: the current directory)"
def _dialect_help() -> str:
    from ..tools.dialects import names  # a listing of the package: nothing imported

    return f"present another agent system's tools: {', '.join(names())} (default: the policy's)"
DATA_HELP = "state directory (default $RUNNER_DATA, else ~/.local/share/runner); the database defaults to SQLite in it"
DB_HELP = "database URL (sqlite:///FILE or postgresql://...); default SQLite in --data"
HOST_HELP = "engine address: unix://, tcp:// or ssh://user@host"

GROUPS = {  # runner GROUP COMMAND: the group's help
    "images": "Build and list the sandbox images (built offline).",
    "policy": "Show and check policies (presets in policies/, or YAML files).",
    "audit": "Read the audit log: one JSON line per tool call.",
    "tenants": "The tenants of `runner serve`: keys, grants and quotas.",
    "snapshot": "List, show and remove the snapshots of sessions (`runner session --snapshot ID` starts from one).",
}
COMMANDS = []  # (group or None, name, function, arguments), in the order --help lists them


def arg(*names, **kw):
    """One argument of a command, as argparse's add_argument takes it."""
    return names, kw


def many(*names, **kw):
    """A repeatable option: a list of its values, empty when not given."""
    return names, {"action": "append", "default": None, "metavar": names[0].lstrip("-").upper(), **kw}


def command(name, *arguments, group=None):
    def register(fn):
        COMMANDS.append((group, name, fn, arguments))
        return fn
    return register


def fail(message: str, code: int = 1) -> SystemExit:
    err(f"runner: {message}")
    return SystemExit(code)


def guarded(fn, *args, **kw):
    """Call fn; turn every expected error into one line on stderr and an exit code."""
    return guarded_as(None, fn, *args, **kw)


def guarded_as(fault, fn, *args, **kw):
    """guarded(fn, ...), but with `fault` (when given) as the exit code of every failure of
    runner's own, usage errors included (`runner exec`: 125, as `docker run`), but for an engine
    that does not answer (69) and an interrupt (128 + its number)."""
    try:
        return _guarded(fn, *args, **kw)
    except SystemExit as e:
        if fault is not None and e.code in (1, 2):
            raise SystemExit(fault) from None
        raise


def _guarded(fn, *args, **kw):
    from executors.errors import InvalidConfig

    from ..errors import RunnerError, UsageError
    from .interrupts import handled

    try:
        with handled():  # SIGINT, SIGTERM, SIGHUP: clean up, then exit 128 + the signal's number
            return fn(*args, **kw)
    except UsageError as e:
        raise fail(str(e), 2) from None
    except InvalidConfig as e:
        raise fail(str(e), 2) from None
    except RunnerError as e:  # the executors' errors too
        raise fail(str(e), getattr(e, "exit_code", 1)) from None
    except BrokenPipeError:  # stdout's reader went away: main() ends quietly
        raise
    except KeyboardInterrupt as e:  # Interrupted, or a plain Ctrl-C outside handled()
        raise fail(str(e) if e.args else "interrupted", getattr(e, "exit_code", 130)) from None
    except Exception as e:  # a policy or docker API error, or a bug: still one line, never a traceback
        loader = sys.modules.get("runner.policy.loader")  # loaded only by commands that read policies
        if loader is not None and isinstance(e, loader.PolicyError):
            raise fail(str(e), 2) from None
        from ..backends.docker import DockerBackend

        refused = DockerBackend.refusal(e)
        if refused is not None:
            raise fail(refused) from None
        raise fail(f"{type(e).__name__}: {e}") from None


def out(text: str = "", end: str = "\n") -> None:
    """Everything the CLI prints goes through here or err(): control characters escaped (a path,
    a name or a policy's text may hold any), line breaks and tabs kept."""
    from ..untrusted.printable import printable

    sys.stdout.write(printable(text, newlines=True) + end)


def err(text: str) -> None:
    from ..untrusted.printable import printable

    sys.stderr.write(printable(text) + "\n")


@command("exec",
         arg("cmd", nargs="...",  # argparse.REMAINDER
             help="the command and its arguments, after --"),
         arg("--image", "-I", help="image to run (never pulled; default runner/base)"),
         arg("--interactive", "-i", action="store_true",
             help="copy stdin in even when it is a terminal (a pipe or file is copied in either way)"),
         arg("--tty", "-t", action="store_true", help="a terminal in the container (-it: an interactive shell)"),
         arg("--rm", action="store_true", help="remove the container when it ends (always so unless -d)"),
         arg("--detach", "-d", action="store_true",
             help="start it and return its id (runner ps, logs, attach, stop); its logs bounded at 2 MiB"),
         arg("--name", help="a name for a detached run (-d)"),
         arg("--ttl", type=float, help="-d: seconds until `runner gc` may remove the run (default a day)"),
         arg("--entrypoint", help="run this instead of the image's ENTRYPOINT (\"\" clears it)"),
         many("--tmpfs", help="PATH[:OPTS], a tmpfs (nosuid,nodev,noexec unless exec; size as /tmp's unless "
                              "size=); repeatable"),
         arg("--shm-size", help="size of /dev/shm (default the engine's 64m)"),
         many("--publish", "-p", help="[IP:]HOSTPORT:CONTAINERPORT[/tcp], bound to 127.0.0.1 unless IP is given; "
                                      "egress stays none unless --network bridge; repeatable"),
         arg("--gpus", help="GPUs to pass: all, N or device=ID[,ID...] (needs the engine's GPU runtime)"),
         arg("--stop-timeout", type=float, default=10.0,
             help="seconds a command asked to end by SIGTERM, SIGINT or SIGHUP has before it is killed (default 10)"),
         arg("--timeout", type=float, help="seconds; then the whole process tree is killed (exit 124)"),
         arg("--memory", help="memory limit, memory+swap equal (default 512m)"),
         arg("--cpus", type=float, help="CPU share (default 1)"),
         arg("--pids", type=int, help="largest number of processes (default 256)"),
         arg("--network", default="none", help="none (default) or bridge"),
         many("--mount", "-v", help="SRC:DST[:ro], repeatable"),
         many("--env", "-e", help="K=V, or K to copy it from here; repeatable"),
         arg("--workdir", "-w", help="working directory in the container"),
         arg("--user", "-u", help="user in the container (default 1000:1000)"),
         arg("--runtime", help="OCI runtime, e.g. runsc for gVisor (default: crun where the engine has it)"),
         arg("--host", "-H", help=HOST_HELP),
         arg("--force-unsafe-mounts", action="store_true",
             help="allow mounting /, sockets, devices, /proc, /sys, /dev or a directory holding them"))
def exec_(a):
    """Run CMD in a fresh hardened container, removed afterwards. The exit status is CMD's."""
    from .exec_cmd import ExecOptions, run

    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd  # everything after the options is CMD's, -- or not
    opts = ExecOptions(cmd=cmd, image=a.image, timeout=a.timeout, memory=a.memory, cpus=a.cpus, pids=a.pids,
                       network=a.network, mounts=a.mount or [], env=a.env or [], workdir=a.workdir, user=a.user,
                       runtime=a.runtime, host=a.host, force_unsafe_mounts=a.force_unsafe_mounts,
                       stop_timeout=a.stop_timeout, interactive=a.interactive, tty=a.tty, entrypoint=a.entrypoint,
                       tmpfs=a.tmpfs or [], shm_size=a.shm_size, gpus=a.gpus, publish=a.publish or [],
                       detach=a.detach, name=a.name, rm=a.rm, ttl=a.ttl)
    return guarded_as(EXEC_FAULT, run, opts)


EXEC_FAULT = exec_.usage_exit = 125  # `runner exec`'s own failures, as `docker run`'s


@command("ps",
         arg("--all", "-a", action="store_true", help="ended runs too"),
         arg("--host", "-H", help=HOST_HELP))
def ps(a):
    """List runner's detached runs (`runner exec -d`)."""
    from .detached import listing, printable_rows

    for line in printable_rows(guarded_as(EXEC_FAULT, listing, a.host, a.all)):
        sys.stdout.write(line + "\n")


@command("logs",
         arg("run", help="a detached run's name or id"),
         arg("--follow", "-f", action="store_true", help="go on until the run ends"),
         arg("--host", "-H", help=HOST_HELP))
def logs(a):
    """Print a detached run's output (its newest 2 MiB at most)."""
    from .detached import logs as do_logs

    return guarded_as(EXEC_FAULT, do_logs, a.host, a.run, a.follow)


@command("stop",
         arg("run", nargs="+", help="detached runs' names or ids"),
         arg("--time", "-t", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)"),
         arg("--host", "-H", help=HOST_HELP))
def stop(a):
    """Stop detached runs and remove them, logs included."""
    from .detached import stop as do_stop

    for run in a.run:
        guarded_as(EXEC_FAULT, do_stop, a.host, run, a.time)


@command("attach",
         arg("run", help="a detached run's name or id"),
         arg("--host", "-H", help=HOST_HELP))
def attach(a):
    """Attach to a detached run: its output here, stdin there (if started with -i), signals passed on."""
    from .detached import attach as do_attach

    return guarded_as(EXEC_FAULT, do_attach, a.host, a.run)


ps.usage_exit = logs.usage_exit = stop.usage_exit = attach.usage_exit = EXEC_FAULT


def _runner_args(executor_help="docker (default) or local"):
    """The options of every command that makes a Runner."""
    return (arg("--workspace", "-w", default=".", help=WORKSPACE_HELP),
            arg("--executor", help=executor_help),
            arg("--policy", help="policy name or file"),
            many("--protect", help="directory (relative to the workspace) that tools may not write; repeatable"),
            arg("--dialect", help=_dialect_help()))


@command("tools",
         arg("--preset", help="show a preset instead of what the policy allows"),
         arg("--format", "-f", default="table", help="table, json, openai, anthropic or mcp"),
         arg("--prompt", action="store_true", help="print the tools' guidance as one prompt block"),
         *(x for x in _runner_args("docker or local") if x[0] != ("--protect",)))
def tools(a):
    """List the tools and their schemas."""
    from .toolcalls import tools as do_tools

    out(guarded(do_tools, a.preset, a.format, a.prompt, a.workspace, a.executor, a.policy, a.dialect))


@command("call",
         arg("tool", help="tool name, e.g. read"),
         arg("args", nargs="?", default="{}", help="the arguments as a JSON object (default {})"),
         *_runner_args(),
         arg("--server", help="run it on a `runner serve` at this URL (with --key), in a session of its own"),
         arg("--key", help="the tenant's API key for --server (or $RUNNER_KEY)"),
         arg("--session", help="with --server: run it in this open session (its id), which stays open"))
def call(a):
    """Run one tool call; print its ToolResult as JSON. Exit 0, 1 if is_error, 2 on a usage error."""
    import os

    from .toolcalls import call as do_call

    if a.server:
        if a.dialect:
            raise fail("--dialect: a dialect is chosen by the server's policy, not with --server", 2)
        from .toolcalls import call_remote

        return guarded(call_remote, a.tool, a.args, a.server, a.key or os.environ.get("RUNNER_KEY"), a.policy,
                       a.session)
    if a.session:
        raise fail("--session: a session id of a `runner serve`, with --server", 2)
    return guarded(do_call, a.tool, a.args, a.workspace, a.executor, a.policy, a.protect or [], a.dialect)


@command("session", *_runner_args(),
         arg("--snapshot", help="start from this snapshot (`runner snapshot list`); the workspace must be empty"))
def session(a):
    """JSON lines: one call {"id", "tool", "args"} per line on stdin, one result per line on stdout."""
    from .toolcalls import session as do_session

    return guarded(do_session, a.workspace, a.executor, a.policy, a.protect or [], a.dialect, a.snapshot)


def _snapshot_args():
    return (arg("--data", help="state directory (default $RUNNER_DATA, else ~/.local/share/runner)"),
            arg("--tenant", help="a tenant of `runner serve` (default: local Runners' snapshots)"))


def _snapshot_store(a):
    from ..controller.snapshots import Store

    if a.tenant:
        from ..servers.serve.tenants import check_name

        check_name(a.tenant)
    return Store(a.data, a.tenant)


@command("list", arg("--json", dest="json_out", action="store_true", help="JSON instead of a table"),
         *_snapshot_args(), group="snapshot")
def snapshot_list(a):
    """The snapshots: id, size in bytes, age in seconds, session and name."""
    import json

    rows = guarded(lambda: _snapshot_store(a).list())
    if a.json_out:
        out(json.dumps(rows, indent=2))
        return 0
    out(f"{'ID':22} {'SIZE':>12} {'AGE(s)':>9}  {'SESSION':14} NAME")
    for m in rows:
        out(f"{m['id']:22} {m.get('size', 0):>12} {m['age']:>9.0f}  {m.get('session') or '-':14} {m.get('name') or ''}")
    return 0


@command("show", arg("id", help="a snapshot id"), *_snapshot_args(), group="snapshot")
def snapshot_show(a):
    """A snapshot's metadata (JSON): what it holds, and what it did not capture."""
    import json

    out(json.dumps(guarded(lambda: _snapshot_store(a).meta(a.id)), indent=2))
    return 0


@command("rm", arg("id", help="a snapshot id"), *_snapshot_args(), group="snapshot")
def snapshot_rm(a):
    """Remove a snapshot."""
    guarded(lambda: _snapshot_store(a).remove(a.id))
    err(f"runner: snapshot {a.id} removed")
    return 0


@command("mcp",
         *_runner_args(),
         arg("--http", action="store_true", help="serve streamable HTTP instead of stdio"),
         arg("--host", default="127.0.0.1", help="address to listen on (--http)"),
         arg("--port", type=int, default=8765, help="port to listen on (--http; 0 picks a free one)"),
         arg("--idle-timeout", type=float, default=1800.0,
             help="seconds after which an idle HTTP session and its sandbox are removed"),
         arg("--max-sessions", type=int, default=32, help="HTTP sessions (so sandboxes) at once; more are refused"))
def mcp(a):
    """An MCP server (stdio, or streamable HTTP with --http) serving the policy's tools; one sandbox per MCP session."""
    try:
        from ..servers.mcp import Options, serve_http, serve_stdio
    except ImportError as e:
        raise fail(f"runner mcp needs the MCP SDK ({e}): pip install 'runner[mcp]'") from None

    opts = Options(workspace=a.workspace, executor=a.executor, policy=a.policy, protect=a.protect or [],
                   idle_timeout=a.idle_timeout, max_sessions=a.max_sessions, dialect=a.dialect)
    return guarded(serve_http, opts, a.host, a.port) if a.http else guarded(serve_stdio, opts)


@command("show",
         arg("name", nargs="?", default="default", help="preset name or YAML file (default: default)"),
         many("--protect", help="add a protected directory; repeatable"), group="policy")
def policy_show(a):
    """Print the effective policy (after --protect and RUNNER_PROTECT_DIRS); secrets never shown."""
    from ..policy import show

    out(guarded(show, a.name, protect=a.protect or []), end="")


@command("check", arg("file", help="policy YAML file or preset name"), group="policy")
def policy_check(a):
    """Exit 0 if the policy is valid; otherwise print each problem as FILE:LINE: path: message."""
    from ..policy import check

    problems = guarded(check, a.file)
    for p in problems:
        err(p)
    if not problems:
        out(f"{a.file}: ok")
        from ..policy import load

        for note in guarded(load, a.file).secret_notes():  # which secrets enter the sandbox
            out(f"{a.file}: {note}")
    return 1 if problems else 0


@command("tail",
         arg("-n", type=int, default=20, help="how many records (default 20)"),
         arg("--json", dest="json_out", action="store_true", help="raw JSON lines"), group="audit")
def audit_tail(a):
    """The newest records of the audit log."""
    from ..reporting.audit import AuditLog, format_record
    from ..untrusted.printable import json_text

    for rec in guarded(lambda: AuditLog().tail(a.n)):
        out(json_text(rec) if a.json_out else format_record(rec))


@command("show", arg("call_id", help="a call id, e.g. c3"), group="audit")
def audit_show(a):
    """Every record of one call id, one JSON line each (ids repeat across sessions: each record
    names its session)."""
    from ..reporting.audit import AuditLog
    from ..untrusted.printable import json_text

    recs = guarded(lambda: AuditLog().show(a.call_id))
    if not recs:
        raise fail(f"no audit record with call id {a.call_id}")
    for rec in recs:
        out(json_text(rec))


@command("host-shell",
         arg("--allow", required=True, help="commands allowed: git:push,git:pull,gh:pr:list (NAME[:ARG...])"),
         arg("--root", help="requests' working directories must resolve inside it"),
         arg("--command", help="the command line; default $SSH_ORIGINAL_COMMAND"))
def host_shell(a):
    """Forced command for authorized_keys: run SSH_ORIGINAL_COMMAND only if allowed, with exec, never a shell."""
    from ..host.shell import main as host_main

    return host_main(a.allow, a.root, a.command)


@command("build",
         arg("name", nargs="?", help="one image (base, runner/base); default: all"),
         arg("--force", action="store_true", help="rebuild even if present and current"),
         arg("--no-force", dest="force", action="store_false", help="build only what is missing or changed (the default)"),
         arg("--host", "-H", help=HOST_HELP), group="images")
def images_build(a):
    """Build the images that are missing or whose recipe changed; do nothing otherwise."""
    from ..backends.docker import DockerBackend
    from . import images

    def go():
        try:
            images.resolve(a.name) if a.name else None
        except KeyError as e:
            from ..errors import UsageError

            raise UsageError(e.args[0]) from None
        return images.build(DockerBackend.client(a.host), a.name, force=a.force)

    guarded(go)


@command("list", arg("--host", "-H", help=HOST_HELP), group="images")
def images_list(a):
    """Show runner's images and whether they are built and current."""
    from ..backends.docker import DockerBackend
    from . import images

    rows = guarded(lambda: images.listing(DockerBackend.client(a.host)))
    out(f"{'IMAGE':28} {'STATE':8} {'ID':14} {'SIZE':>7}  DESCRIPTION")
    for r in rows:
        size = f"{r['size_mb']}MB" if r["size_mb"] else "-"
        out(f"{r['name']:28} {r['state']:8} {r['id'] or '-':14} {size:>7}  {r['description']}")


@command("gc",
         arg("--dry-run", action="store_true", help="only say what would be removed"),
         arg("--host", "-H", help=HOST_HELP))
def gc(a):
    """Remove what runner left behind: containers whose owner is gone or whose expiry has passed,
    their egress networks and swarm services, the agent-socket directories and result stores
    of controllers that were killed, and the snapshots they left unfinished."""
    from .maintenance import gc_steps

    verb = "would remove" if a.dry_run else "removed"
    removed = []
    for step in gc_steps(a.host):  # each printed as it ends: this machine's even when no engine answers
        found = guarded(step, a.dry_run)
        for cid, name, reason in found:  # labels may hold a caller's session name
            out(f"{verb} {cid} ({name}): {reason}")
        removed += found
    out(f"{verb} {len(removed)} orphan(s)")


@command("nodes",
         arg("--host", "-H", help="a swarm manager's engine address"),
         arg("--json", dest="as_json", action="store_true", help="one JSON list"))
def nodes(a):
    """List the swarm's nodes (executor swarm): state, free capacity and live sandboxes."""
    import json

    from ..backends.swarm import SwarmBackend

    rows = guarded(SwarmBackend.nodes, a.host)
    if a.as_json:
        out(json.dumps(rows))
        return 0
    out(f"{'NODE':14} {'HOST':16} {'ADDRESS':16} {'ROLE':8} {'STATE':8} {'AVAIL':7} {'CPUS FREE':>11} "
        f"{'MEMORY FREE':>17}  SANDBOXES")
    for r in rows:  # hostnames, labels and session names are the cluster's: printed safely
        out(f"{r['id'][:12]:14} {r['hostname'][:16]:16} {r['addr'][:16]:16} {r['role']:8} {r['state']:8} "
            f"{r['availability']:7} {r['cpus_free']:5.2f}/{r['cpus']:<5.2f} "
            f"{r['memory_free'] / 2**30:7.2f}/{r['memory'] / 2**30:<7.2f}G  "
            f"{len(r['sandboxes'])}{': ' + ', '.join(r['sandboxes']) if r['sandboxes'] else ''}")


@command("doctor", arg("--host", "-H", help=HOST_HELP))
def doctor(a):
    """Check the engine, images and runtimes, and say what to fix."""
    from executors.errors import EngineUnavailable

    from .maintenance import doctor as do_doctor

    ok = True
    rows = guarded(do_doctor, a.host)
    for status, what, detail in rows:
        ok &= status != "FAIL"
        out(f"[{status:4}] {what}: {detail}")
    if rows and rows[0][:2] == ("FAIL", "engine"):  # the one line there is: no engine answers
        return EngineUnavailable.exit_code
    return 0 if ok else 1


# -- runner serve and runner tenants (runner/servers/serve/, the extra runner[serve]) --------------------
def _serve_module(name: str):
    import importlib

    try:
        return importlib.import_module(f"runner.servers.serve.{name}")
    except ImportError as e:
        raise fail(f"runner serve needs its libraries ({e}): pip install 'runner[serve]'") from None


def _db_args():
    return arg("--data", help=DATA_HELP), arg("--db", help=DB_HELP)


@command("serve",
         arg("--host", default="127.0.0.1", help="address to listen on"),
         arg("--port", type=int, default=8700, help="port to listen on (0 picks a free one)"),
         *_db_args(),
         arg("--idle-timeout", type=float, default=1800.0, help="seconds after which an unused session ends"),
         arg("--max-lifetime", type=float, default=86400.0, help="seconds after which any session ends"),
         arg("--max-body", type=int, default=16 * 1024 * 1024, help="largest request body in bytes (413 past it)"),
         arg("--max-calls-per-tenant", type=int, default=16,
             help="a tenant's calls, file transfers and execs in flight at once (429 past it)"),
         arg("--max-transfers-per-tenant", type=int, default=None,
             help="a tenant's file uploads and downloads in flight at once, of its calls (429 past it; "
                  "default 4, or --max-calls-per-tenant where that is lower)"),
         arg("--max-connections", type=int, default=1024,
             help="connections at once; past it a new one closes the oldest whose request head has not come"),
         arg("--header-timeout", type=float, default=10.0,
             help="seconds a connection may take to send a request's head (then it is closed)"),
         arg("--keep-alive-timeout", type=float, default=5.0,
             help="seconds an idle keep-alive connection stays open"),
         arg("--session-retention", type=float, default=7 * 86400.0,
             help="seconds an ended session's row is kept (then purged)"),
         arg("--max-session-ops-per-minute", type=int, default=120,
             help="sessions a tenant may create and delete per minute (429 past it)"),
         arg("--pause-after", type=float, default=0.0,
             help="seconds idle after which a session's sandbox is paused, no CPU until its next call (0: never)"),
         arg("--hibernate-after", type=float, default=0.0,
             help="seconds idle after which a session's /tmp goes to disk and its sandbox is removed (its memory "
                  "freed; its processes end); its next call gets them back on a fresh sandbox (0: never)"))
def serve(a):
    """The multi-tenant HTTP service: sessions, tool calls, files and MCP at /mcp (API docs at /docs)."""
    main_ = _serve_module("main")
    opts = main_.ServeOptions(host=a.host, port=a.port, data=a.data, db=a.db, idle_timeout=a.idle_timeout,
                              max_lifetime=a.max_lifetime, max_body=a.max_body, tenant_calls=a.max_calls_per_tenant,
                              tenant_transfers=a.max_transfers_per_tenant, max_connections=a.max_connections,
                              header_timeout=a.header_timeout, keep_alive_timeout=a.keep_alive_timeout,
                              session_retention=a.session_retention, session_ops=a.max_session_ops_per_minute,
                              pause_after=a.pause_after, hibernate_after=a.hibernate_after)
    return guarded(main_.serve, opts)


def _tenants_db(a):
    return _serve_module("db").open_db(a.data, a.db)


@command("add",
         arg("name", help="the tenant's name (a-z, 0-9, - and _)"),
         many("--policy", help="a policy it may use (preset or file; repeatable; the first is its default; "
                               "default multi-tenant)"),
         many("--image", help="an image it may run with POST /v1/exec (repeatable; default none)"),
         arg("--max-sessions", type=int, help="open sessions at once (default 10)"),
         arg("--calls-per-minute", type=int, help="tool calls per minute (default 600)"),
         *_db_args(), group="tenants")
def tenants_add(a):
    """Add a tenant; print its API key alone on stdout (only a hash of it is kept)."""
    tenants = _serve_module("tenants")
    key = guarded(lambda: tenants.add(_tenants_db(a), a.name, a.policy or [], a.max_sessions, a.calls_per_minute,
                                      a.image or []))
    err(f"runner: tenant {a.name} added; its key follows on stdout (it is not shown again)")
    out(key)


@command("key", arg("name", help="the tenant's name"), *_db_args(), group="tenants")
def tenants_key(a):
    """A new API key for the tenant, alone on stdout; the old key stops working at once."""
    tenants = _serve_module("tenants")
    out(guarded(lambda: tenants.rotate(_tenants_db(a), a.name)))


@command("list", arg("--json", dest="json_out", action="store_true", help="JSON instead of a table"), *_db_args(),
         group="tenants")
def tenants_list(a):
    """The tenants, their grants, quotas and open sessions."""
    import json

    rows = guarded(lambda: _serve_module("tenants").listing(_tenants_db(a)))
    if a.json_out:
        out(json.dumps(rows, indent=2))
        return 0
    out(f"{'TENANT':20} {'SESSIONS':>8} {'MAX':>4} {'CALLS/MIN':>9}  POLICIES  IMAGES")
    for r in rows:
        out(f"{r['name']:20} {r['open_sessions']:>8} {r['max_sessions']:>4} {r['calls_per_minute']:>9}  "
            f"{','.join(r['policies'])}  {','.join(r['images']) or '-'}")


@command("remove", arg("name", help="the tenant's name"), *_db_args(), group="tenants")
def tenants_remove(a):
    """Remove the tenant: its key stops working, its sessions are closed (sandboxes and workspaces removed)."""
    closed = guarded(lambda: _serve_module("admin").remove_tenant(a.data, a.db, a.name))
    err(f"runner: tenant {a.name} removed; {closed} open session(s) closed")


def summary(doc: str) -> str:
    """A command's first sentence, for the listings."""
    first = " ".join(doc.split())
    return first[:first.find(". ") + 1] if ". " in first else first


def listing(group=None) -> str:
    """`runner --help`, `runner GROUP --help`: the commands there are, without building their parsers."""
    where = f"runner {group}" if group else "runner"
    rows = [(name, summary(fn.__doc__)) for g, name, fn, _ in COMMANDS if g == group]
    if group is None:
        rows += [(name, summary(text)) for name, text in GROUPS.items()]
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"usage: {where} COMMAND [ARGS...]", "",
             GROUPS[group] if group else "Run AI agents' tools, and any command, inside ephemeral hardened containers.",
             "", "commands:", *(f"  {name:{width}}{text}" for name, text in rows), "",
             f"`{where} COMMAND --help` shows a command's arguments."]
    return "\n".join(lines)


def parser(group, name, fn, arguments):
    """One command's parser, built only when that command runs."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, as every other usage error: not the usage block first
            raise fail(f"{self.prog[len('runner '):]}: {message} (`{self.prog} --help` shows the arguments)",
                       getattr(fn, "usage_exit", 2))

    p = Parser(prog=" ".join(x for x in ("runner", group, name) if x), description=fn.__doc__, allow_abbrev=False)
    for names, kw in arguments:
        p.add_argument(*names, **kw)
    return p


def _warn_with(show):
    """warnings.showwarning that gives runtimes.RuntimeFallback as the CLI's other notices (one line
    on stderr) and any other warning to show (the one it replaces)."""
    def warn(message, category, filename, lineno, file=None, line=None) -> None:
        if category.__name__ == "RuntimeFallback":
            err(f"runner: warning: {message}")
        else:
            show(message, category, filename, lineno, file, line)

    return warn


def main(argv=None) -> None:
    import warnings

    shown = warnings.showwarning
    warnings.showwarning = _warn_with(shown)
    try:
        sys.exit(dispatch(list(sys.argv[1:] if argv is None else argv)))
    except KeyboardInterrupt:  # before a command's own handling starts (its imports): one line
        err("runner: interrupted")
        sys.exit(130)
    except BrokenPipeError:  # the reader went away (`runner tools | head -1`): nothing more to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush then fails quietly)
        sys.exit(1)
    finally:
        warnings.showwarning = shown


def dispatch(argv: list) -> int:
    group = argv[0] if argv and argv[0] in GROUPS else None
    at = 1 if group else 0
    if len(argv) <= at or argv[at] in ("-h", "--help"):  # `runner`, `runner images`: what there is to choose
        asked = len(argv) > at  # (the listing is this module's own text: written as it is)
        (sys.stdout if asked else sys.stderr).write(listing(group) + "\n")
        return 0 if asked else 2
    found = [c for c in COMMANDS if c[:2] == (group, argv[at])]
    if not found:
        where = f"runner {group}" if group else "runner"
        err(f"{where}: no command {argv[at]!r}; `{where} --help` lists them")
        return 2
    group, name, fn, arguments = found[0]
    p = parser(group, name, fn, arguments)
    rest = argv[at + 1:]
    # Options and positionals in any order (`runner call read --workspace D '{...}'`), but for a
    # command that takes the rest of the line as it is (exec's CMD), which argparse parses apart.
    args = p.parse_args(rest) if any(kw.get("nargs") == "..." for _, kw in arguments) else p.parse_intermixed_args(rest)
    return fn(args) or 0


if __name__ == "__main__":
    main()
