"""The way in for a tenant's request, one for every route (/v1 and /mcp; a new route, E2B's
say, takes the same): its key, read from its one Authorization header; then every cap of the
tenant: its calls at once in this process
(--max-calls-per-tenant, waiting calls included), its calls per minute (counted in the database,
so across instances), and its sessions (/v1 rows, MCP sessions and running execs, one maximum).
Past a cap a route answers Over: /v1 a 429 with Retry-After, /mcp a tool error saying the same."""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable

import anyio.to_thread

from ...errors import RunnerError
from ..httpheaders import header
from . import tenants as T
from .sessions import Full

FULL_RETRY_AFTER = 10


async def authenticated(state, scope) -> T.Grant | None:
    """The tenant whose key the request's `Authorization: Bearer KEY` carries, or None."""
    scheme, _, key = (header(scope, "authorization") or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    grant = await anyio.to_thread.run_sync(T.authenticate, state.db, key.strip(), limiter=state.quick)
    if grant is not None and isinstance(scope.get("state"), dict):
        scope["state"]["tenant"] = grant.name  # for the access log and the request's span (runner/servers/observe.py)
    return grant


class Over(RunnerError):
    """A tenant past one of its caps: str() says which; retry_after in seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Slot:
    """One of a tenant's calls in flight (and of its file transfers, for one), released once."""

    def __init__(self, gate: "Gate", name: str, transfer: bool) -> None:
        self.gate, self.name, self.transfer = gate, name, transfer

    def release(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate._leave(self.name, self.transfer)

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Gate:
    def __init__(self, state) -> None:
        self.state = state
        self._lock = threading.Lock()

    def slot(self, grant: T.Grant, transfer: bool = False) -> Slot:
        """A place among the tenant's calls in flight here (Over past --max-calls-per-tenant), taken
        before the call waits for anything, so one tenant cannot hold every worker thread. A file
        upload or download (transfer) also takes one of the tenant's transfers (Over past
        --max-transfers-per-tenant): each holds a body or a chunk in memory."""
        st = self.state
        with self._lock:
            n = st.in_flight[grant.name]
            if n >= st.tenant_calls:
                raise Over(f"tenant {grant.name} has {n} calls in flight on this server, its maximum (runner serve "
                           "--max-calls-per-tenant): wait for one to finish", 1)
            m = st.transfers[grant.name]
            if transfer and m >= st.tenant_transfers:
                raise Over(f"tenant {grant.name} has {m} file transfers in flight on this server, its maximum "
                           "(runner serve --max-transfers-per-tenant): wait for one to finish", 1)
            st.in_flight[grant.name] += 1
            if transfer:
                st.transfers[grant.name] += 1
        return Slot(self, grant.name, transfer)

    def _leave(self, name: str, transfer: bool) -> None:
        with self._lock:
            for count, taken in ((self.state.in_flight, True), (self.state.transfers, transfer)):
                if taken:
                    count[name] -= 1
                    if not count[name]:
                        del count[name]

    def session_op(self, grant: T.Grant) -> None:
        """One of the tenant's session creations or deletions (each makes or removes a workspace,
        a row, containers): at most --max-session-ops-per-minute in any 60 s here, else Over."""
        st = self.state
        now = time.monotonic()
        with self._lock:
            seen = st.ops_seen.setdefault(grant.name, collections.deque())
            while seen and seen[0] <= now - 60:
                seen.popleft()
            if len(seen) >= st.session_ops:
                retry = max(int(seen[0] + 60 - now + 0.999), 1)
                raise Over(f"tenant {grant.name} made or ended {len(seen)} sessions in the last minute, its maximum "
                           f"(runner serve --max-session-ops-per-minute): retry after {retry} s", retry)
            seen.append(now)

    async def per_minute(self, grant: T.Grant) -> None:
        """Count one call against the tenant's calls per minute (Over past it)."""
        self.minute_passed(grant, await anyio.to_thread.run_sync(T.take_call, self.state.db, grant,
                                                                 limiter=self.state.quick))

    @staticmethod
    def minute_passed(grant: T.Grant, retry: float | None) -> None:
        """Over when T.take_call answered a time to retry after (the tenant is past its calls per minute)."""
        if retry is not None:
            raise Over(f"tenant {grant.name} is over its {grant.calls_per_minute} calls per minute: retry after "
                       f"{int(retry + 0.999)} s", int(retry + 0.999))

    async def call(self, grant: T.Grant) -> Slot:
        """A tool call: its slot, then its count against the calls per minute."""
        slot = self.slot(grant)
        try:
            await self.per_minute(grant)
        except BaseException:
            slot.release()
            raise
        return slot

    def session(self, grant: T.Grant, kind: str) -> Callable[[], None]:
        """A place among the tenant's sessions for one held outside the /v1 table (kind "mcp" or
        "exec"; /v1 rows are admitted by Sessions.create under the same lock): what ends it."""
        try:
            return self.state.sessions.admit_elsewhere(grant, kind)
        except Full as e:
            raise Over(str(e), FULL_RETRY_AFTER) from None
