"""The `runner serve` process: the database migrated, orphans of a previous run reaped, the reaper
loop (which also purges ended sessions' rows), uvicorn with bounded connections (runner/servers/serve/conns.py);
on SIGTERM/SIGINT this instance's sandboxes are removed at once (calls in flight answer 503;
sessions stay open)."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import anyio
import anyio.to_thread

from .sessions import Limits

REAP_EVERY = 1.0
PURGE_EVERY = 60.0  # seconds between purges of ended sessions' rows


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8700
    data: str | None = None
    db: str | None = None
    idle_timeout: float = 1800.0
    max_lifetime: float = 86400.0
    max_body: int = 16 * 1024 * 1024
    threads: int = 64  # tools, files and execs at once
    tenant_calls: int = 16  # of which one tenant's (calls waiting for their session's turn included)
    tenant_transfers: int | None = None  # of which file uploads and downloads (a body in memory each); None: min(4, tenant_calls)
    max_connections: int = 1024  # runner/servers/serve/conns.py
    header_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    session_retention: float = 7 * 86400.0  # an ended session's row is purged after this
    session_ops: int = 120  # sessions one tenant may create and delete per minute
    log_format: str = "json"  # the log on stderr: json lines or text (runner/servers/logs.py)
    log_level: str = "info"
    audit: str | None = None  # the audit log (default DATA/audit.jsonl: runner/servers/serve/observability.py)
    pause_after: float = 0.0  # seconds idle after which a session's sandbox is paused (0: never; serve/state.py)
    hibernate_after: float = 0.0  # seconds idle after which its /tmp goes to disk and its sandbox is removed


DESCRIPTORS_BESIDES = 256  # open files the server needs besides its connections (engine, database, files)


QUICK_THREADS = 16  # key checks and database steps, never queued behind the tools


def build(opts: ServeOptions):
    """(app, state), the database migrated and what a previous run left reaped."""
    from ...errors import UsageError
    from ..httpheaders import refuse_duplicates
    from ..logs import Log
    from ..observe import Access
    from . import app as A
    from . import db as D
    from . import observability
    from .network import TenantNetworks
    from .sessions import Sessions

    if opts.idle_timeout <= 0 or opts.max_lifetime <= 0:
        raise UsageError("--idle-timeout and --max-lifetime must be positive numbers of seconds")
    if not 1 <= opts.tenant_calls <= opts.threads:
        raise UsageError(f"--max-calls-per-tenant must be between 1 and {opts.threads}")
    if opts.tenant_transfers is None:
        opts.tenant_transfers = min(4, opts.tenant_calls)
    if not 1 <= opts.tenant_transfers <= opts.tenant_calls:
        raise UsageError(f"--max-transfers-per-tenant must be between 1 and {opts.tenant_calls}")
    if min(opts.max_connections, opts.session_ops) < 1 or min(opts.header_timeout, opts.keep_alive_timeout) <= 0 \
            or opts.session_retention < 0:
        raise UsageError("--max-connections, --max-session-ops-per-minute, --header-timeout and --keep-alive-timeout "
                         "must be positive, --session-retention at least 0")
    try:
        log = Log("runner serve", opts.log_format, opts.log_level)
    except ValueError as e:
        raise UsageError(f"--log-format/--log-level: {e}") from None
    data = D.data_dir(opts.data)
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    database = D.Database(D.database_url(opts.data, opts.db))
    nets = TenantNetworks(data)
    sessions = Sessions(database, data, Limits(opts.idle_timeout, opts.max_lifetime, opts.session_retention),
                        tenant_network=nets.for_tenant)
    removed = sessions.adopt_at_start()
    if removed:
        log.info("reaper", f"removed {len(removed)} sandbox(es) a previous run left", removed=len(removed))
    state = A.State(db=database, data=data, sessions=sessions, max_body=opts.max_body,
                    threads=anyio.CapacityLimiter(opts.threads), quick=anyio.CapacityLimiter(QUICK_THREADS),
                    tenant_calls=opts.tenant_calls, tenant_transfers=opts.tenant_transfers, session_ops=opts.session_ops)
    state.extra["networks"] = nets
    obs = observability.attach(state, log, opts.audit)
    state.extra["pause_after"] = opts.pause_after
    state.extra["hibernate_after"] = opts.hibernate_after
    try:
        from .mcp import McpEndpoint
    except ImportError:
        McpEndpoint = None
    if McpEndpoint is not None:
        state.mcp = McpEndpoint(state)
    app = A.create_app(state)
    return Access(refuse_duplicates(A.BodyLimit(_route_mcp(app, state.mcp), opts.max_body)), obs), state


def _log(state):
    return state.extra["observer"].log


def _route_mcp(app, mcp):
    """/mcp to the MCP endpoint (exactly that path, as `runner mcp` serves it), the rest to FastAPI."""
    if mcp is None:
        return app

    async def route(scope, receive, send):
        if scope["type"] == "http" and scope.get("path") in ("/mcp", "/mcp/"):
            return await mcp(scope, receive, send)
        return await app(scope, receive, send)
    return route


async def _reaper(state) -> None:
    purged = 0.0
    while True:
        await anyio.sleep(REAP_EVERY)
        try:
            closed = await anyio.to_thread.run_sync(state.sessions.reap_once)
            if closed:
                _log(state).info("reaper", f"closed {len(closed)} session(s) past their idle timeout or lifetime",
                                 sessions=closed)
            if state.extra.get("pause_after"):
                from .state import pause_idle

                await anyio.to_thread.run_sync(pause_idle, state)
            if state.extra.get("hibernate_after"):
                from .state import hibernate_idle

                await anyio.to_thread.run_sync(hibernate_idle, state)
            if anyio.current_time() - purged >= min(PURGE_EVERY, state.sessions.limits.retention):
                purged = anyio.current_time()
                await anyio.to_thread.run_sync(state.sessions.purge_ended)
            if state.mcp is not None:
                await state.mcp.reap()
        except Exception as e:  # the database may be briefly away: try again next round
            _log(state).warning("reaper", f"reaper: {type(e).__name__}: {e}")


async def _announce(userver, state) -> None:
    while not userver.started:
        await anyio.sleep(0.05)
    for s in userver.servers:
        for sock in s.sockets:
            host, port = sock.getsockname()[:2]
            _log(state).event("listening", f"listening on http://{host}:{port} (API docs at /docs; database "
                              f"{state.db.engine.dialect.name})", always=True, url=f"http://{host}:{port}",
                              pid=os.getpid())
            return


async def _serve(app, state, opts: ServeOptions) -> None:
    import uvicorn

    from .app import begin_shutdown

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # uvicorn's handler of SIGTERM and SIGINT, and ours
            if not state.stopping:
                _log(state).info("stopping", f"stopping on signal {sig}: calls in flight answer 503", signal=sig)
            begin_shutdown(state)
            super().handle_exit(sig, frame)

    from .conns import ConnLimits, fit, protocol

    most, have = fit(opts.max_connections, DESCRIPTORS_BESIDES)
    if have is not None:
        _log(state).warning("warning", f"the limit of open files is {have}: at most {most} connections at once "
                                       "(raise `ulimit -n` for more)")
    limits = ConnLimits(most, opts.header_timeout, opts.keep_alive_timeout)
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning", lifespan="off",
                            http=protocol(limits), timeout_keep_alive=opts.keep_alive_timeout,
                            timeout_graceful_shutdown=30)  # calls end once their sandboxes go: let them answer
    userver = Server(config)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, userver.handle_exit)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reaper, state)
            tg.start_soon(_announce, userver, state)
            if state.mcp is not None:
                await state.mcp.run(tg)
            await userver.serve()
            tg.cancel_scope.cancel()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        with anyio.CancelScope(shield=True):
            if state.mcp is not None:
                await anyio.to_thread.run_sync(state.mcp.close_all)
            await anyio.to_thread.run_sync(state.sessions.close_all_live)
            if state.extra.get("e2b") is not None:
                await anyio.to_thread.run_sync(state.extra["e2b"].close_all)
            state.extra["networks"].close()
            _log(state).info("stopped", "stopped: this instance's sandboxes are removed (open sessions stay open)")
            state.extra["observer"].close()


def serve(opts: ServeOptions) -> int:
    app, state = build(opts)
    from ..mcp import LOOPBACK

    if opts.host not in LOOPBACK:
        _log(state).warning("warning", f"serving on {opts.host}: use TLS in front of it (a reverse proxy), keys "
                                       "travel in headers")
    try:
        anyio.run(_serve, app, state, opts)
    except KeyboardInterrupt:
        pass
    finally:
        state.db.close()
    return 0
