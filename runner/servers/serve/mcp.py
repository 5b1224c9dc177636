"""MCP over streamable HTTP at /mcp, with the tenants' keys: `runner mcp`'s server
(runner/servers/mcp.py), one sandbox per MCP session, each on a fresh workspace of its own under
the data directory, with the tenant's default policy. An MCP session id answers only to the
tenant that opened it: another tenant's requests with it get 404, like its sessions on /v1.
Every session id is minted by the SDK and the session is its tenant's from that moment; an id
the server did not mint is 404 too (runner/servers/mcp.py's Registry). A session takes its place
among the tenant's sessions when it is opened (initialize: 429 past the maximum), called or not,
its opening and its DELETE count among the tenant's session operations per minute like /v1's,
and it ends with DELETE, its idle timeout, or its tenant's removal. Its calls take the tenant's
places like /v1's (runner/servers/serve/gate.py): calls at once, calls per minute, on the server's threads."""
from __future__ import annotations

import os
from pathlib import Path

import anyio
import anyio.to_thread

from ...errors import ErrorType
from ..mcp import McpRefused, Options, CallRefused, Registry, build_server
from . import tenants as T
from .gate import Over, authenticated
from .sessions import MCP_PREFIX, own_workspace

MAX_MCP_SESSIONS = 256


class TenantRegistry(Registry):
    """runner mcp's Registry, each session owned by the tenant of the request that opened it and
    its Runner made for that tenant."""

    def __init__(self, state, idle_timeout: float) -> None:
        super().__init__(Options(idle_timeout=idle_timeout, max_sessions=MAX_MCP_SESSIONS))
        self.state = state

    def owner_of(self, scope) -> str | None:
        return scope["runner.tenant"].name

    def admit(self, ctx):
        """The tenant's maximum counts its MCP sessions with its /v1 ones (McpRefused past it); a
        request outside any session uses the place its request was admitted with."""
        place = ctx.request.scope.get("runner.place")
        if place is not None and place.get("release"):
            return place.pop("release")
        try:
            return self.state.gate.session(ctx.request.scope["runner.tenant"], "mcp")
        except Over as e:
            raise McpRefused(str(e)) from None

    def make_runner_for(self, ctx):
        return self.runner_maker(ctx.request.scope["runner.tenant"])

    def runner_maker(self, grant: T.Grant):
        state = self.state

        def make():
            from ...controller import piddirs
            from ...controller.core import Runner

            # in a directory named for this process (m<pid>.<start>-<random>, the server's own): a
            # start after a kill -9 removes it
            (state.data / "mcp" / grant.name).mkdir(parents=True, exist_ok=True, mode=0o755)
            home = Path(piddirs.make(MCP_PREFIX, str(state.data / "mcp" / grant.name)))
            os.chmod(home, 0o755)
            ws = home / "ws"
            ws.mkdir(mode=0o755)
            own_workspace(ws)
            try:
                r = Runner(workspace=ws, policy=grant.policies[grant.default_policy], tenant=grant.name)
            except BaseException:
                state.sessions.remove_workspace(home)
                raise
            close = r.close

            def close_and_remove(wait: bool = True) -> None:  # the workspace goes with its Runner, on every way out
                try:
                    close(wait=True)  # (its sandbox removed before its workspace, and counted as the tenant's till then)
                finally:
                    state.sessions.remove_workspace(home)
            r.close = close_and_remove
            return r
        return make


class McpEndpoint:
    """The ASGI app of /mcp: a key check, the tenant's place for a new session, then the SDK
    behind the registry's check that a session id named is one minted for this tenant."""

    def __init__(self, state) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.state = state
        idle = state.sessions.limits.idle_timeout
        self.registry = TenantRegistry(state, idle)
        self.server = build_server(self.registry.session_for, threads=state.threads, enter=self._enter)
        # Keys, not the Host header, guard this endpoint; a browser's cross-site request has no key.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.manager = StreamableHTTPSessionManager(app=self.server, session_idle_timeout=idle,
                                                    max_sessions=MAX_MCP_SESSIONS, security_settings=security)

    async def _enter(self, ctx, is_call: bool):
        """The tenant's places for one request (runner/servers/serve/gate.py): a call takes one of its calls
        at once and counts against its calls per minute; a listing (a sandbox too) takes the first."""
        grant: T.Grant = ctx.request.scope["runner.tenant"]
        try:
            slot = await self.state.gate.call(grant) if is_call else self.state.gate.slot(grant)
        except Over as e:
            from ...results import ToolResult

            raise CallRefused(ToolResult.error(str(e), error_type=ErrorType.GATED, retry_after=e.retry_after)) from None
        return slot.release

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
        owners = self.registry.owners()
        if owners:
            present = await anyio.to_thread.run_sync(T.present, self.state.db, set(owners.values()),
                                                     limiter=self.state.quick)
            ended |= {sid for sid, tenant in owners.items() if tenant not in present}
        for sid in ended:
            await anyio.to_thread.run_sync(self.registry.end, sid)

    def close_all(self) -> None:
        self.registry.close_all()

    async def __call__(self, scope, receive, send):
        from starlette.responses import JSONResponse

        from ..httpheaders import header
        from ..mcp import SESSION_HEADER

        if scope["type"] != "http":
            return
        grant = await authenticated(self.state, scope)
        if grant is None:
            return await JSONResponse({"detail": "no valid API key: send Authorization: Bearer KEY"}, status_code=401,
                                      headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        release = None  # a request outside any session (initialize) takes a place among the tenant's sessions
        sid = header(scope, SESSION_HEADER)
        try:
            if not sid and scope.get("method") == "POST":
                self.state.gate.session_op(grant)  # a session made (and its workspace), like /v1's
                release = await anyio.to_thread.run_sync(self.state.gate.session, grant, "mcp",
                                                          limiter=self.state.quick)
            elif sid and scope.get("method") == "DELETE" and self.registry.owned(sid, grant.name) is not None:
                self.state.gate.session_op(grant)  # a session ended (its sandbox and workspace removed)
        except Over as e:
            return await JSONResponse({"detail": str(e)}, status_code=429,
                                      headers={"Retry-After": str(e.retry_after)})(scope, receive, send)
        place = {"release": release}
        scope = {**scope, "runner.tenant": grant, "runner.place": place}

        def mint(sid: str) -> None:  # the new session is the tenant's from birth, in the place admitted for it
            self.registry.mint(sid, grant.name, place.pop("release", None), self.registry.runner_maker(grant))

        try:
            await self.registry.handle(self.manager.handle_request, scope, receive, send, owner=grant.name, mint=mint)
        finally:
            if place.get("release"):  # no session was opened with it
                place.pop("release")()
