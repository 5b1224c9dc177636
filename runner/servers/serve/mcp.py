"""MCP over streamable HTTP at /mcp, with the tenants' keys: `runner mcp`'s server
(runner/servers/mcp.py), one sandbox per MCP session, each on a fresh workspace of its own under
the data directory, with the tenant's default policy. An MCP session id answers only to the
tenant that opened it: another tenant's requests with it get 404, like its sessions on /v1.
A session takes its place among the tenant's sessions when it is opened (initialize: 429 past
the maximum), called or not, and ends with DELETE, its idle timeout, or its tenant's removal."""
from __future__ import annotations

import shutil
import threading

import anyio
import anyio.to_thread

from ...errors import ErrorType
from ..mcp import SESSION_HEADER, McpRefused, Options, Registry, McpSession, build_server
from . import tenants as T
from .app import FULL_RETRY_AFTER
from .sessions import Full, own_workspace

MAX_MCP_SESSIONS = 256


class TenantRegistry(Registry):
    """runner mcp's Registry, each session's Runner made for the tenant of the request that opened it."""

    def __init__(self, state, idle_timeout: float) -> None:
        super().__init__(Options(idle_timeout=idle_timeout, max_sessions=MAX_MCP_SESSIONS))
        self.state = state

    def open(self, sid: str, grant: T.Grant, release) -> None:
        """The session the SDK just opened, in the place admitted for it (its sandbox comes with
        its first call)."""
        with self._lock:
            self.sessions[sid] = McpSession(self.runner_maker(grant), release=release)

    def admit(self, ctx):
        """The tenant's maximum counts its MCP sessions with its /v1 ones (McpRefused past it); a
        request outside any session uses the place its request was admitted with."""
        place = ctx.request.scope.get("runner.place")
        if place is not None and place.get("release"):
            return place.pop("release")
        grant: T.Grant = ctx.request.scope["runner.tenant"]
        try:
            return self.state.sessions.admit_elsewhere(grant, "mcp")
        except Full as e:
            raise McpRefused(str(e)) from None

    def make_runner_for(self, ctx):
        return self.runner_maker(ctx.request.scope["runner.tenant"])

    def runner_maker(self, grant: T.Grant):
        state = self.state

        def make():
            import secrets

            from ...controller.core import Runner

            ws = state.data / "mcp" / grant.name / ("m" + secrets.token_hex(12))
            ws.mkdir(parents=True, mode=0o755)
            own_workspace(ws)
            try:
                r = Runner(workspace=ws, policy=grant.policies[grant.default_policy], tenant=grant.name)
            except BaseException:
                shutil.rmtree(ws, ignore_errors=True)
                raise
            close = r.close

            def close_and_remove() -> None:  # the workspace goes with its Runner, on every way out
                try:
                    close()
                finally:
                    shutil.rmtree(ws, ignore_errors=True)
            r.close = close_and_remove
            call = r.call

            def counted_call(tool, args=None, **kw):  # the tenant's calls per minute, as on /v1
                from ...results import ToolResult

                retry = T.take_call(state.db, grant)
                if retry is not None:
                    return ToolResult.error(f"tenant {grant.name} is over its {grant.calls_per_minute} calls per "
                                            f"minute: retry after {int(retry + 0.999)} s", error_type=ErrorType.GATED,
                                            retry_after=int(retry + 0.999))
                return call(tool, args, **kw)
            r.call = counted_call
            return r
        return make


class McpEndpoint:
    """The ASGI app of /mcp: a key check, the owner check of the MCP session id, then the SDK."""

    def __init__(self, state) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.state = state
        idle = state.sessions.limits.idle_timeout
        self.registry = TenantRegistry(state, idle)
        self.server = build_server(self.registry.session_for, threads=MAX_MCP_SESSIONS + 2)
        # Keys, not the Host header, guard this endpoint; a browser's cross-site request has no key.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.manager = StreamableHTTPSessionManager(app=self.server, session_idle_timeout=idle,
                                                    max_sessions=MAX_MCP_SESSIONS, security_settings=security)
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    async def run(self, tg) -> None:
        """Start the SDK's session manager in the server's task group (it stops with it)."""
        started = anyio.Event()

        async def keep():
            async with self.manager.run():
                started.set()
                await anyio.sleep_forever()
        tg.start_soon(keep)
        await started.wait()

    async def reap(self) -> None:
        """End the idle sessions, and those of tenants removed (`runner tenants remove`)."""
        ended = set(self.registry.idle())
        with self._lock:
            owners = dict(self._owners)
        if owners:
            present = await anyio.to_thread.run_sync(T.present, self.state.db, set(owners.values()),
                                                     limiter=self.state.quick)
            ended |= {sid for sid, tenant in owners.items() if tenant not in present}
        for sid in ended:
            await anyio.to_thread.run_sync(self._end, sid)

    def _end(self, sid: str) -> None:
        self.registry.end(sid)
        with self._lock:
            self._owners.pop(sid, None)

    def close_all(self) -> None:
        self.registry.close_all()

    async def __call__(self, scope, receive, send):
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        scheme, _, key = headers.get("authorization", "").partition(" ")
        grant = None
        if scheme.lower() == "bearer":
            grant = await anyio.to_thread.run_sync(T.authenticate, self.state.db, key.strip(),
                                                   limiter=self.state.quick)
        if grant is None:
            return await JSONResponse({"detail": "no valid API key: send Authorization: Bearer KEY"}, status_code=401,
                                      headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        sid = headers.get(SESSION_HEADER)
        if sid:
            with self._lock:
                owner = self._owners.get(sid)
            if owner is not None and owner != grant.name:
                return await JSONResponse({"detail": "no such MCP session"}, status_code=404)(scope, receive, send)
        place = {}  # a request outside any session (initialize) takes a place among the tenant's sessions
        if not sid and scope.get("method") == "POST":
            try:
                place["release"] = await anyio.to_thread.run_sync(self.state.sessions.admit_elsewhere, grant, "mcp",
                                                                  limiter=self.state.quick)
            except Full as e:
                return await JSONResponse({"detail": str(e)}, status_code=429,
                                          headers={"Retry-After": str(FULL_RETRY_AFTER)})(scope, receive, send)
        scope = {**scope, "runner.tenant": grant, "runner.place": place}
        status = 0

        async def watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for k, v in message.get("headers") or []:
                    if k.decode("latin-1").lower() == SESSION_HEADER and not sid and status < 400:
                        opened = v.decode("latin-1")
                        with self._lock:
                            self._owners.setdefault(opened, grant.name)
                        if place.get("release"):  # the place is the new session's now
                            self.registry.open(opened, grant, place.pop("release"))
            await send(message)

        try:
            await self.manager.handle_request(scope, receive, watch)
        finally:
            if place.get("release"):  # no session was opened with it
                place.pop("release")()
        if sid and scope.get("method") == "DELETE" and 200 <= status < 300:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._end, sid)
