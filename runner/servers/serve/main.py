"""The `runner serve` process: the database migrated, orphans of a previous run reaped, the reaper
loop, uvicorn; on SIGTERM/SIGINT this instance's sandboxes are removed at once (calls in flight
answer 503; sessions stay open)."""
from __future__ import annotations

import signal
import sys
from dataclasses import dataclass

import anyio
import anyio.to_thread

from .sessions import Limits

REAP_EVERY = 1.0


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


QUICK_THREADS = 16  # key checks and database steps, never queued behind the tools


def build(opts: ServeOptions):
    """(app, state), the database migrated and what a previous run left reaped."""
    from ...errors import UsageError
    from . import app as A
    from . import db as D
    from .network import TenantNetworks
    from .sessions import Sessions

    if opts.idle_timeout <= 0 or opts.max_lifetime <= 0:
        raise UsageError("--idle-timeout and --max-lifetime must be positive numbers of seconds")
    if not 1 <= opts.tenant_calls <= opts.threads:
        raise UsageError(f"--max-calls-per-tenant must be between 1 and {opts.threads}")
    data = D.data_dir(opts.data)
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    database = D.Database(D.database_url(opts.data, opts.db))
    nets = TenantNetworks()
    sessions = Sessions(database, data, Limits(opts.idle_timeout, opts.max_lifetime), tenant_network=nets.for_tenant)
    removed = sessions.adopt_at_start()
    if removed:
        sys.stderr.write(f"runner serve: removed {len(removed)} sandbox(es) a previous run left\n")
    state = A.State(db=database, data=data, sessions=sessions, max_body=opts.max_body,
                    threads=anyio.CapacityLimiter(opts.threads), quick=anyio.CapacityLimiter(QUICK_THREADS),
                    tenant_calls=opts.tenant_calls)
    state.extra["networks"] = nets
    try:
        from .mcp import McpEndpoint
    except ImportError:
        McpEndpoint = None
    if McpEndpoint is not None:
        state.mcp = McpEndpoint(state)
    app = A.create_app(state)
    return A.BodyLimit(_route_mcp(app, state.mcp), opts.max_body), state


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
    while True:
        await anyio.sleep(REAP_EVERY)
        try:
            await anyio.to_thread.run_sync(state.sessions.reap_once)
            if state.mcp is not None:
                await state.mcp.reap()
        except Exception as e:  # the database may be briefly away: try again next round
            sys.stderr.write(f"runner serve: reaper: {type(e).__name__}: {e}\n")


async def _announce(userver, state) -> None:
    while not userver.started:
        await anyio.sleep(0.05)
    for s in userver.servers:
        for sock in s.sockets:
            host, port = sock.getsockname()[:2]
            sys.stderr.write(f"runner serve: listening on http://{host}:{port} (API docs at /docs; database "
                             f"{state.db.engine.dialect.name})\n")
            sys.stderr.flush()
            return


async def _serve(app, state, opts: ServeOptions) -> None:
    import uvicorn

    from .app import begin_shutdown

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # uvicorn's handler of SIGTERM and SIGINT, and ours
            begin_shutdown(state)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning", lifespan="off",
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
            state.extra["networks"].close()


def serve(opts: ServeOptions) -> int:
    app, state = build(opts)
    from ..mcp import LOOPBACK

    if opts.host not in LOOPBACK:
        sys.stderr.write(f"runner serve: serving on {opts.host}: use TLS in front of it (a reverse proxy), keys "
                         "travel in headers\n")
    try:
        anyio.run(_serve, app, state, opts)
    except KeyboardInterrupt:
        pass
    finally:
        state.db.close()
    return 0
