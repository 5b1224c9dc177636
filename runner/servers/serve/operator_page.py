"""The operator page, /ui: tenants with their quotas and usage, the open sessions (state, age,
last call), the last calls and errors, refreshed every second.

The page is three static files shipped in the package (runner/servers/serve/ui/: no build step,
nothing from another host) and holds no data: its script reads the operator token from the
page's fragment (/ui#token=TOKEN, never sent to a server; then kept in the tab's sessionStorage
and taken out of the address) or asks for it, and polls GET /ui/state with it as a Bearer
credential. /ui/state answers only to the operator token (runner/servers/operator.py) - never to
a tenant's key, and not to loopback without it: it names every tenant.
"""
from __future__ import annotations

import time
from pathlib import Path

import anyio.to_thread
from fastapi import Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from sqlalchemy import select

from ... import __version__
from . import db as D
from . import tenants as T

FILES = Path(__file__).parent / "ui"
ASSETS = {"ui.js": "text/javascript", "ui.css": "text/css"}
# the page loads its own script and style and talks to this server alone
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer"}


def register(app, state) -> None:
    from ..operator import OperatorAuth, token_for

    operator = OperatorAuth(token_for(state.data))
    started = time.time()

    @app.get("/ui", include_in_schema=False)
    async def page():
        return FileResponse(FILES / "index.html", media_type="text/html", headers=HEADERS)

    @app.get("/ui/", include_in_schema=False)
    async def page_slash():
        return RedirectResponse("/ui", status_code=308)

    @app.get("/ui/assets/{name}", include_in_schema=False)
    async def asset(name: str):
        if name not in ASSETS:
            return JSONResponse({"detail": "no such file"}, status_code=404)
        return FileResponse(FILES / name, media_type=ASSETS[name], headers=HEADERS)

    @app.get("/ui/state", include_in_schema=False)
    async def ui_state(request: Request):
        if not operator.allowed(request.scope, loopback_ok=False):
            return JSONResponse({"detail": OperatorAuth.REFUSAL}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer", **HEADERS})
        body = await anyio.to_thread.run_sync(snapshot, state, started, limiter=state.quick)
        return JSONResponse(body, headers=HEADERS)


def snapshot(state, started: float) -> dict:
    """What the page shows, read now: the database's tenants and open sessions (every instance's),
    this instance's Runners, and its last calls."""
    now = time.time()
    window = int(now // 60)
    tenants = T.listing(state.db)
    with state.db.session() as s:
        used = dict(s.execute(select(D.Usage.tenant, D.Usage.count).where(D.Usage.window == window)).all())
        rows = s.scalars(select(D.SessionRow).where(D.SessionRow.state == "open")
                         .order_by(D.SessionRow.created)).all()
    for t in tenants:
        t["calls_this_minute"] = used.get(t["name"], 0)
        t["in_flight"] = state.in_flight.get(t["name"], 0)
    me = state.sessions.me
    sessions = []
    for r in rows:
        live = state.sessions.live.get(r.id)
        if live is not None and not live.closed:
            where = "running a call" if live.lock.locked() else "idle, sandbox here"
        elif r.owner and r.owner != me:
            where = "held by another instance"
        else:
            where = "idle, no sandbox"
        sessions.append({"id": r.id, "tenant": r.tenant, "policy": r.policy, "sandbox": r.sandbox or "policy's",
                         "state": where, "age_s": round(now - r.created, 1), "idle_s": round(now - r.last_used, 1),
                         "calls": r.calls, "last_call": f"c{r.calls}" if r.calls else None})
    return {"version": __version__, "now": now, "uptime_s": round(now - started, 1), "tenants": tenants,
            "sessions": sessions, **state.recent.snapshot()}
