"""`runner serve`'s operator routes and what feeds them: GET /metrics (runner/servers/metrics.py,
behind the operator token: runner/servers/operator.py), GET /v1/ready (the engine answers, the
database answers, the images of the granted policies and execs are present), the server's log
(runner/servers/logs.py) and its audit log under --data (or --audit).

    obs = attach(state, opts)   # in main.build, before create_app
    register(app, state)        # in create_app
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..logs import Log
from ..observe import Observer, make_observer
from .apidoc import Ready, doc

AUDIT_FILE = "audit.jsonl"


def audit_path(data: Path, audit: str | None) -> Path:
    """The server's audit log: --audit, else DATA/audit.jsonl."""
    return Path(audit).expanduser().resolve() if audit else data / AUDIT_FILE


def attach(state, log: Log, audit: str | None = None) -> Observer:
    """The Observer of the server of `state`, kept as state.extra["observer"]; the audit log of its
    Runners made the server's own (RUNNER_AUDIT_LOG of this process: a policy that names its own
    audit.path keeps it)."""
    import os

    from ...reporting.audit import ENV_AUDIT_LOG
    from ..operator import token_for

    path = audit_path(state.data, audit)
    os.environ[ENV_AUDIT_LOG] = str(path)
    state.extra["audit_path"] = path

    def sessions() -> list[tuple[str, str, int]]:
        from sqlalchemy import func, select

        from . import db as D

        with state.db.session() as s:
            rows = s.execute(select(D.SessionRow.tenant, D.SessionRow.state, func.count())
                             .where(D.SessionRow.state != "closed")
                             .group_by(D.SessionRow.tenant, D.SessionRow.state)).all()
        return [(t, st, n) for t, st, n in rows]

    def live() -> dict[str, int]:
        out: dict[str, int] = {}
        with state.sessions._lock:
            lives = list(state.sessions.live.values())
        for lv in lives:
            if not lv.closed:
                t = lv.runner.policy.tenant or ""
                out[t] = out.get(t, 0) + 1
        for (tenant, kind), n in list(state.sessions.held.items()):
            if kind == "mcp" and n:
                out[tenant] = out.get(tenant, 0) + n
        return out

    obs = make_observer(log, token_for(state.data), "runner-serve", sessions, live)
    state.extra["observer"] = obs
    from ...reporting import observe

    def lifecycle(kind: str, f: dict) -> None:
        if kind == "session":
            log.info(f"session_{f['action']}", f"session {f['session']} of {f['tenant']} {f['action']}"
                     + (f" ({f['reason']})" if f.get("reason") else ""), tenant=f.get("tenant"),
                     session=f.get("session"), reason=f.get("reason"))
    obs.stops.append(observe.listen(lifecycle))
    observe.set_say(lambda text, level: log.event("warning" if level != "info" else "info", text, level))
    return obs


def observer(state) -> Observer | None:
    return state.extra.get("observer")


def register(app, state) -> None:
    """GET /metrics and GET /v1/ready on the app."""

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request):
        obs = observer(state)
        if obs is None or not obs.operator.allowed(request.scope, loopback_ok=True):
            from ..operator import OperatorAuth

            return JSONResponse({"detail": OperatorAuth.REFUSAL}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        if obs.metrics is None:
            return JSONResponse({"detail": "prometheus-client is not installed (pip install 'runner[serve]')"},
                                status_code=501)
        from ..metrics import CONTENT_TYPE

        body = await anyio.to_thread.run_sync(obs.metrics.exposition, limiter=state.quick)
        return Response(body, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})

    @app.get("/v1/ready", **doc(None, Ready, secured=False, responses_extra={
        503: {"model": Ready, "description": "not ready: each check says why"}}))
    async def ready(request: Request):
        """Readiness: the engine answers, the database answers, and the images the tenants'
        policies and exec grants name are present. 200 when all are, else 503; each check says
        ok or why not (image names only to the operator)."""
        obs = observer(state)
        operator = obs is not None and obs.operator.allowed(request.scope, loopback_ok=True)
        checks = await anyio.to_thread.run_sync(_readiness, state, operator, limiter=state.quick)
        ok = all(c["ok"] for c in checks.values())
        return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks},
                            status_code=200 if ok else 503)


def _readiness(state, operator: bool) -> dict[str, Any]:
    from sqlalchemy import select, text

    from . import db as D

    checks: dict[str, Any] = {}
    tenants = []
    try:
        with state.db.engine.connect() as c:
            c.execute(text("select 1"))
        with state.db.session() as s:
            tenants = s.execute(select(D.Tenant.policies, D.Tenant.images)).all()
        checks["database"] = {"ok": True, "dialect": state.db.engine.dialect.name}
    except Exception as e:
        checks["database"] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    client = None
    try:
        from ...backends.docker import DockerBackend

        client = DockerBackend.client()
        checks["engine"] = {"ok": True}
    except Exception as e:
        checks["engine"] = {"ok": False, "error": str(e)[:300]}
    wanted = _images(tenants)
    if client is None:
        checks["images"] = {"ok": False, "error": "the engine does not answer"}
    else:
        missing = []
        for image in sorted(wanted):
            try:
                client.images.get(image)
            except Exception:
                missing.append(image)
        checks["images"] = {"ok": not missing, "wanted": len(wanted), "missing": missing if operator else len(missing)}
        try:
            client.close()
        except Exception:
            pass
    return checks


_POLICY_IMAGES: dict[str, str | None] = {}


def _images(tenants) -> set[str]:
    """The images of the granted policies' sandboxes and of the exec grants."""
    import json

    from .app import _qualify  # (runner exec's naming of an image, as the exec grants are checked)
    from ...policy import load

    out: set[str] = set()
    for policies, images in tenants:
        for source in json.loads(policies).values():
            if source not in _POLICY_IMAGES:
                try:
                    pol = load(source)
                    _POLICY_IMAGES[source] = pol.sandbox.image if pol.sandbox.executor == "docker" else None
                except Exception:
                    _POLICY_IMAGES[source] = None
            if _POLICY_IMAGES[source]:
                out.add(_qualify(_POLICY_IMAGES[source]))
        out |= {_qualify(i) for i in json.loads(images)}
    return out
