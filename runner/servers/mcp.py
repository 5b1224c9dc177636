"""`runner mcp`: the policy's tools served to MCP clients, on stdio or streamable HTTP.

Built on the official `mcp` SDK's low-level Server (the protocol is the SDK's, never ours).
Each MCP session gets its own Runner, so its own sandbox, made on first use and closed when the
session ends: EOF on stdin, SIGTERM or SIGINT, an HTTP DELETE, or an idle timeout. Runner calls
block, so they run on worker threads: sessions proceed side by side, and a cancelled request or
a vanished client never waits for a tool to finish before its sandbox is removed.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from ..errors import RunnerError
from .httpheaders import header, refuse_duplicates
from ..results import ImageBlock, ToolResult
from .one_at_a_time import Stoppable, in_turn

SESSION_HEADER = "mcp-session-id"

LOOPBACK = ("127.0.0.1", "localhost", "::1")  # hosts a server may listen on without a warning


@dataclass
class Options:
    """What `runner mcp` was started with: the same as `runner call` and `runner tools`."""

    workspace: str = "."
    executor: str | None = None
    policy: str | None = None
    protect: list[str] = field(default_factory=list)
    idle_timeout: float = 1800.0
    max_sessions: int = 32  # --http: sandboxes at once (sessions, and requests outside any session)
    dialect: str | None = None  # another agent system's tool set (runner/tools/dialects); default: the policy's

    def make_runner(self):
        from ..controller.core import make_runner

        return make_runner(self.workspace, self.executor, self.policy, list(self.protect), self.dialect)


class McpRefused(RunnerError):
    """This request gets no sandbox: its session ended, or the server is full."""


class CallRefused(RunnerError):
    """A call its server's caps refuse (runner serve: its tenant's); `result` says which and when to retry."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result.content)
        self.result = result


class McpSession:
    """One MCP session's Runner: made on first use, used by one call at a time, closed once."""

    def __init__(self, make_runner: Callable[[], Any], runner: Any = None,
                 release: Callable[[], None] | None = None, owner: str | None = None) -> None:
        self._make = make_runner
        self.owner = owner  # who opened it, alone may use it (runner serve: its tenant; runner mcp: None)
        self.runner = runner
        self._release = release  # called once, when the session ends (the registry's admission)
        self._lock = threading.Lock()
        self.requests = 0  # MCP requests waiting on it (a vanished client's request is cancelled)
        self.turn: anyio.Semaphore | None = None  # whose request runs next (made in the event loop)
        self._told_skipped = False
        self.closed = False
        self.last_used = time.monotonic()

    @contextlib.contextmanager
    def _runner(self):
        """The Runner, for this thread alone while the block runs."""
        with self._lock:
            if self.closed:
                raise McpRefused("this MCP session has ended and its sandbox was removed: start a new session")
            if self.runner is None:
                self.runner = self._make()
            try:
                yield self.runner
            finally:
                self.last_used = time.monotonic()

    def tools(self) -> list[dict]:
        with self._runner() as r:
            tools = mcp_tools(r)
            if not self._told_skipped:  # as `runner tools` does, on stderr (stdout is the protocol's)
                from ..untrusted.printable import printable

                self._told_skipped = True
                for e in r.custom_errors():  # what the sandbox wrote: escaped, one line each
                    sys.stderr.write(printable(f"runner mcp: skipped custom tool {e.get('path')} ({e.get('place')}): "
                                               f"{e.get('error')}") + "\n")
            return tools

    def call(self, name: str, args: dict, on_output: Callable[[str], None] | None = None,
             stop: Stoppable | None = None) -> tuple[ToolResult, bool]:
        """(the result, whether the tool list changed). on_output: Runner.call's (a streaming
        tool's output, redacted, as it comes). stop: the request's, stopped when its client cancels it."""
        with self._runner() as r:
            if stop is not None and not stop.begin(r.session):
                raise McpRefused("the client cancelled this call before it began")
            try:
                before = mcp_tools(r) if name == "refresh_tools" else None
                result = r.call(name, args, on_output=on_output)
                return result, before is not None and mcp_tools(r) != before
            finally:
                if stop is not None:
                    stop.end()

    def close(self) -> None:
        """Remove the sandbox. A call still running (its client gone) has its sandbox removed
        under it, so it ends now rather than at its timeout; then the Runner closes."""
        self.closed = True
        while not self._lock.acquire(timeout=0.5):
            if self.runner is not None:
                remove_sandboxes(self.runner)
        try:
            if self.runner is not None:  # (removed before the answer: a server's sandboxes are counted)
                self.runner.close(wait=True)
                self.runner = None
        finally:
            self._lock.release()
            release, self._release = self._release, None
            if release is not None:
                release()


def remove_sandboxes(runner) -> None:
    """Force-remove the sandboxes of this Runner's session (made by this process)."""
    try:
        runner.session.placement.remove_sandboxes()
    except Exception as e:  # the Runner's close still runs, once the call has ended
        sys.stderr.write(f"runner mcp: could not remove the sandbox of session {runner.session_id}: {e}\n")


def mcp_tools(runner) -> list[dict]:
    """The Runner's tools (in its dialect, if any) in the MCP format of `runner tools --format mcp`."""
    from ..tools.dialects import tools_of
    from ..tools.schemas import formats

    return json.loads(formats.export(tools_of(runner), "mcp"))


def to_mcp_result(res: ToolResult) -> types.CallToolResult:
    if isinstance(res.content, str):
        blocks: list = [types.TextContent(type="text", text=res.content)]
    else:
        blocks = [types.ImageContent(type="image", data=b.data, mime_type=b.media_type) if isinstance(b, ImageBlock)
                  else types.TextContent(type="text", text=b.text) for b in res.content]
    return types.CallToolResult(content=blocks, is_error=res.is_error, _meta={"runner/meta": res.meta})


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


async def relay_progress(relay, report: Callable[..., Any]) -> None:
    """A call's output (runner/servers/relay.py's OutputRelay) sent as progress notifications of its
    request, each chunk a message, its progress the characters of output so far. A report that
    fails (the client went away) ends the sending, not the call: the rest is taken and dropped."""
    async for text in relay.chunks():
        if report is None:
            continue
        try:
            await report(relay.through, None, text)
        except Exception:
            report = None


Enter = Callable[[Any, bool], Any]  # async (ctx, is_call) -> what releases the place taken; raises CallRefused


def build_server(session_for: Callable[[Any], tuple[McpSession, bool]], threads: int | anyio.CapacityLimiter,
                 enter: Enter | None = None) -> Server:
    """The MCP server: tools/list and tools/call, each against the session `session_for(ctx)`
    names (and closes afterwards when it says the session is one request's only); at most
    `threads` Runner calls at once (one per session is all that ever runs; a limiter: the
    server's own, shared with its other routes). enter: the server's caps on each request before
    it waits for anything (runner serve: its tenant's calls at once and calls per minute)."""
    from .. import __version__

    limiter: list[anyio.CapacityLimiter] = [threads] if isinstance(threads, anyio.CapacityLimiter) else []

    async def admitted(ctx, is_call: bool):
        return await enter(ctx, is_call) if enter is not None else None

    async def in_session(ctx, fn, *args, abandon: bool = False):
        """fn(session, *args) on a worker thread. abandon: a cancelled request (its client gone)
        stops waiting at once; the call runs on until it ends or its session is closed."""
        if not limiter:
            limiter.append(anyio.CapacityLimiter(threads))
        session, one_shot = session_for(ctx)
        session.requests += 1
        try:
            return await in_turn(session, functools.partial(fn, session, *args), abandon, limiter[0])
        finally:
            session.requests -= 1
            session.last_used = time.monotonic()
            if one_shot:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(session.close)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        release = None
        try:
            release = await admitted(ctx, False)
            tools = await in_session(ctx, McpSession.tools)
        except CallRefused as e:
            raise MCPError(code=types.INVALID_REQUEST, message=str(e.result.content)) from None
        except McpRefused as e:
            raise MCPError(code=types.INVALID_REQUEST, message=str(e)) from None
        except Exception as e:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"could not list the tools: {e}") from None
        finally:
            if release is not None:
                release()
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        try:
            release = await admitted(ctx, True)
        except CallRefused as e:
            return to_mcp_result(e.result)
        try:
            return await call_in_session(ctx, name, args)
        finally:
            if release is not None:
                release()

    async def call_in_session(ctx, name: str, args: dict) -> types.CallToolResult:
        from .relay import OutputRelay

        relay = OutputRelay() if progress_token_from_params(ctx.params) is not None else None
        out: dict[str, Any] = {}
        stop = Stoppable()
        async with anyio.create_task_group() as tg:
            if relay is not None:
                tg.start_soon(relay_progress, relay, ctx.session.report_progress)
            try:
                out["result"], out["changed"] = await in_session(ctx, McpSession.call, name, args,
                                                                 relay.feed if relay else None, stop, abandon=True)
            except anyio.get_cancelled_exc_class():  # the client cancelled it, or went away: the call stops
                # now, not at its timeout with the session's next call waiting behind it (a thread: a
                # cancelled task cannot wait here)
                threading.Thread(target=stop.stop).start()
                raise
            except McpRefused as e:
                out["error"] = str(e)
            except Exception as e:  # the Runner reports a tool's failure as a result: this is the Runner failing
                out["error"] = f"runner could not run {name}: {type(e).__name__}: {e}"
            finally:
                if relay is not None:
                    relay.close()
        if "error" in out:
            return error_result(out["error"])
        if out["changed"]:
            await ctx.session.send_tool_list_changed()
        return to_mcp_result(out["result"])

    return Server("runner", version=__version__,
                  instructions="Tools that run in runner's sandbox; the workspace is at the sandbox's working "
                               "directory.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def init_options(server: Server):
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


def _ignore_signals() -> None:
    """While the sandboxes are being removed at the end: a client that escalates to SIGTERM (the
    SDK's does after 2 s) must not cut that short and leave a container behind."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


# -- stdio ----------------------------------------------------------------------------------
async def _close_on_signal(session: McpSession) -> None:
    """SIGTERM, SIGINT or SIGHUP: remove the sandbox, then exit. The SDK's stdin reader sits in a
    thread that only EOF ends, so waiting for the server to wind down could wait forever."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(session.close)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)


async def _serve_stdio(session: McpSession) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(lambda ctx: (session, False), threads=2)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_close_on_signal, session)
            async with stdio_server() as (read, write):
                await server.run(read, write, init_options(server))
            tg.cancel_scope.cancel()
    finally:
        _ignore_signals()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(session.close)


def serve_stdio(opts: Options) -> int:
    """Serve one MCP session on stdin/stdout until EOF or a signal; its sandbox goes with it."""
    session = McpSession(opts.make_runner, runner=opts.make_runner())  # a bad option fails here, before serving
    try:
        anyio.run(_serve_stdio, session)
    finally:
        session.close()
    return 0


# -- streamable HTTP ------------------------------------------------------------------------
class Registry:
    """The sessions of an HTTP server, by the MCP session id the SDK minted for each. A session is
    made when the SDK mints its id, owned from birth by whoever opened it (runner serve: a tenant;
    runner mcp: None), and never under an id a client chose: `handle` answers 404, as the SDK does
    for an unknown session, to a request naming an id not minted here, ended, or another owner's."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._lock = threading.Lock()
        self.sessions: dict[str, McpSession] = {}
        self.one_shots = 0

    def owner_of(self, scope) -> str | None:
        """Who sends this request (runner serve: its tenant)."""
        return None

    def owned(self, sid: str, owner: str | None) -> McpSession | None:
        with self._lock:
            s = self.sessions.get(sid)
        return s if s is not None and s.owner == owner and not s.closed else None

    def mint(self, sid: str, owner: str | None, release: Callable[[], None] | None = None,
             make_runner: Callable[[], Any] | None = None) -> None:
        """The session the SDK just opened under the id it minted (its sandbox comes with its first call)."""
        with self._lock:
            self.sessions[sid] = McpSession(make_runner or self.opts.make_runner, release=release, owner=owner)

    def owners(self) -> dict[str, str | None]:
        with self._lock:
            return {sid: s.owner for sid, s in self.sessions.items()}

    def session_for(self, ctx) -> tuple[McpSession, bool]:
        request = getattr(ctx, "request", None)
        sid = header(request.scope, SESSION_HEADER) if request is not None else None
        if sid:
            s = self.owned(sid, self.owner_of(request.scope))
            if s is None:  # (handle refused it already; this holds for any other way in)
                raise McpRefused(f"no MCP session {sid[:64]} here (ended, or never opened here): start a new session")
            return s, False
        with self._lock:
            if len(self.sessions) + self.one_shots >= self.opts.max_sessions:
                raise McpRefused(f"runner mcp serves at most {self.opts.max_sessions} sandboxes at once "
                                "(--max-sessions): end a session (DELETE) or wait for an idle one to be reaped")
            admitted = self.admit(ctx)
            # a request outside any session (stateless protocol): a sandbox for it alone
            self.one_shots += 1
            return McpSession(self.make_runner_for(ctx), release=self._one_shot_ended(admitted)), True

    def make_runner_for(self, ctx) -> Callable[[], Any]:
        """What makes the Runner of a request outside any session (runner serve: the tenant's)."""
        return self.opts.make_runner

    def admit(self, ctx) -> Callable[[], None] | None:
        """Raise McpRefused when the sandbox this request takes is one too many for whoever sends
        it (runner serve: the tenant's maximum); else what to call when it ends."""
        return None

    def _one_shot_ended(self, admitted: Callable[[], None] | None) -> Callable[[], None]:
        def ended() -> None:
            with self._lock:
                self.one_shots -= 1
            if admitted is not None:
                admitted()
        return ended

    def end(self, sid: str) -> None:
        with self._lock:
            s = self.sessions.pop(sid, None)
        if s is not None:
            s.close()

    def idle(self) -> list[str]:
        """Sessions no request has waited on for the idle timeout. A call whose client vanished
        does not keep its session: the request was cancelled, and closing removes the sandbox."""
        now = time.monotonic()
        with self._lock:
            return [sid for sid, s in self.sessions.items()
                    if not s.requests and now - s.last_used > self.opts.idle_timeout]

    async def reap(self) -> None:
        while True:
            await anyio.sleep(min(max(self.opts.idle_timeout / 4, 0.2), 10.0))
            for sid in self.idle():
                await anyio.to_thread.run_sync(self.end, sid)

    def close_all(self) -> None:
        with self._lock:
            sids = list(self.sessions)
        threads = [threading.Thread(target=self.end, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    async def handle(self, app, scope, receive, send, owner: str | None = None,
                     mint: Callable[[str], None] | None = None) -> None:
        """One HTTP request to the SDK's `app`, from `owner`. A request naming a session is 404
        unless the session is this owner's; the id the SDK mints for a request outside any session
        becomes a session of this owner as the answer starts (`mint(sid)`, by default self.mint);
        a DELETE the SDK accepted ends the session and removes its sandbox."""
        sid = header(scope, SESSION_HEADER)
        if sid and self.owned(sid, owner) is None:
            from starlette.responses import JSONResponse

            return await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                "code": types.INVALID_REQUEST, "message": "McpSession not found"}}, status_code=404)(scope, receive, send)
        status = 0

        async def watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if not sid and status < 400:
                    for k, v in message.get("headers") or []:
                        if k.lower() == SESSION_HEADER.encode():
                            (mint or (lambda new: self.mint(new, owner)))(v.decode("latin-1"))
            await send(message)

        await app(scope, receive, watch)
        if sid and scope.get("method") == "DELETE" and 200 <= status < 300:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.end, sid)


async def _announce(userver, path: str) -> None:
    while not userver.started:
        await anyio.sleep(0.05)
    for s in userver.servers:
        for sock in s.sockets:
            host, port = sock.getsockname()[:2]
            sys.stderr.write(f"runner mcp: serving MCP on http://{host}:{port}{path}\n")
            sys.stderr.flush()
            return


HTTP_MAX_CONNECTIONS = 1024  # --http: connections at once (runner/servers/serve/conns.py's bounds)


async def _serve_http(opts: Options, host: str, port: int) -> None:
    import uvicorn

    from .observe import Access, metrics_endpoint

    registry = Registry(opts)
    server = build_server(registry.session_for, threads=opts.max_sessions + 2)
    app = server.streamable_http_app(streamable_http_path="/mcp", host=host, session_idle_timeout=opts.idle_timeout,
                                     max_sessions=opts.max_sessions)
    obs = _observer(registry)

    async def sessions(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if scope.get("path") == "/metrics" and scope.get("method") == "GET":  # runner/servers/observe.py
            return await metrics_endpoint(obs, scope, receive, send)
        return await registry.handle(app, scope, receive, send)

    # the same bounds on connections as runner serve's (runner/servers/serve/conns.py): no key guards this
    # server, so a flood of heads that never end held every descriptor and answered no client
    from .serve.conns import ConnLimits, fit, protocol

    most, have = fit(HTTP_MAX_CONNECTIONS, 64 + 4 * opts.max_sessions)
    if have is not None:
        sys.stderr.write(f"runner mcp: the limit of open files is {have}: at most {most} connections at once "
                         "(raise `ulimit -n` for more)\n")
    limits = ConnLimits(most)
    config = uvicorn.Config(Access(refuse_duplicates(sessions), obs), host=host, port=port, log_level="warning",
                            lifespan="on", timeout_graceful_shutdown=5, http=protocol(limits),
                            timeout_keep_alive=limits.keep_alive_timeout)
    userver = uvicorn.Server(config)
    # uvicorn turns SIGTERM and SIGINT into a graceful shutdown, then raises the signal again
    # under the handlers it found: let those be no-ops, so the sandboxes are removed below.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: setattr(userver, "should_exit", True))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.reap)
            tg.start_soon(_announce, userver, "/mcp")
            await userver.serve()
            tg.cancel_scope.cancel()
    finally:
        _ignore_signals()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(registry.close_all)
        obs.close()


def _observer(registry: "Registry"):
    """runner mcp --http's metrics (GET /metrics: loopback, or $RUNNER_OPERATOR_TOKEN) and traces;
    its log says warnings only (no line per request, as before)."""
    from .logs import Log
    from .observe import make_observer
    from .operator import token_for

    def live() -> dict[str, int]:  # one server, one workspace: no tenant (the policy's `tenant` labels calls)
        n = sum(not s.closed for s in list(registry.sessions.values()))
        return {"": n} if n else {}
    return make_observer(Log("runner mcp", "text", "warning"), token_for(None), "runner-mcp",
                         sessions=lambda: [(t, "open", n) for t, n in live().items()], live=live)


def serve_http(opts: Options, host: str, port: int) -> int:
    """Serve streamable HTTP until SIGTERM/SIGINT; every session's sandbox goes with its session."""
    from ..errors import UsageError

    if opts.idle_timeout <= 0:
        raise UsageError("--idle-timeout must be a positive number of seconds")
    if opts.max_sessions < 1:
        raise UsageError("--max-sessions must be at least 1")
    opts.make_runner().close()  # a bad option fails here, before serving
    if host not in LOOPBACK:
        sys.stderr.write(f"runner mcp: warning: serving on {host} without authentication: anyone who reaches "
                         "this port can run tools in sandboxes with your workspace\n")
    try:
        anyio.run(_serve_http, opts, host, port)
    except KeyboardInterrupt:
        pass
    return 0
