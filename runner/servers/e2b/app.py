"""E2B's API under /e2b on `runner serve`'s port: the control plane (REST, FastAPI) and envd (Connect
RPC process.Process and filesystem.Filesystem with the connectrpc runtime, /files, /health).

A request with an `E2b-Sandbox-Id` header is envd's: the sandbox id (unguessable) names it, and a
sandbox created secure also needs its `X-Access-Token`; an unknown id, or one whose token does not
match, is 404 / 401. Every other request is the control plane's and needs `X-API-KEY`: a runner
tenant key in E2B's form, `e2b_` + the hex of the key's bytes (keys.py). Another tenant's sandbox
is 404. Every request takes the tenant's places at the gate (runner/servers/serve/gate.py): its
calls at once; a command started counts against its calls per minute; a sandbox is one of its
sessions and its creation and kill count among its session operations.
"""
from __future__ import annotations

import hmac
import os
import secrets
import threading
import time
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ...untrusted.wspath import usage
from . import sandbox as X

GRACE = 1.0
DISK_TOTAL = 10 * 1024**3  # what metrics report as the disk's size: the workspace has no size of its own  # seconds between two sweeps of sandboxes past their timeout


class E2B:
    """The sandboxes of this process, and the ASGI app of /e2b."""

    def __init__(self, state) -> None:
        self.state = state
        self.sandboxes: dict[str, X.Sandbox] = {}
        self.lock = threading.Lock()
        self.rest = rest_app(self)
        from .envd_services import filesystem_app, process_app

        self.process = process_app(self)
        self.filesystem = filesystem_app(self)
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    # -- sandboxes ---------------------------------------------------------------------
    def find(self, sid: str, tenant: str | None = None) -> X.Sandbox | None:
        with self.lock:
            s = self.sandboxes.get(sid)
        if s is None or s.killed or (tenant is not None and s.tenant != tenant):
            return None
        return s

    def listing(self, tenant: str) -> list[X.Sandbox]:
        with self.lock:
            return [s for s in self.sandboxes.values() if s.tenant == tenant and not s.killed]

    def kill(self, sbx: X.Sandbox, why: str = "killed") -> None:
        with self.lock:
            self.sandboxes.pop(sbx.id, None)
        sbx.audit("kill", {"sandbox": sbx.id, "why": why})
        try:
            if sbx.paused and not sbx.cold:
                X.resume(sbx)  # (a frozen container is thawed before it is stopped)
        except Exception:
            pass
        sbx.close()
        self.state.sessions.remove_workspace(sbx.workspace.parent)

    def resumed(self, sbx: X.Sandbox) -> bool:
        """Resume a paused sandbox (connect, or traffic when it resumes on it): it runs its timeout again."""
        if not X.resume(sbx):
            return False
        sbx.end_at = max(sbx.end_at, time.time() + sbx.timeout)
        sbx.audit("resume", {})
        return True

    def _reap(self) -> None:
        while not self._stop.wait(GRACE):
            now = time.time()
            with self.lock:
                due = [s for s in self.sandboxes.values() if s.end_at <= now and not s.paused]
            for s in due:
                try:
                    if s.on_timeout == "pause":  # (E2B's autoPause: it stays, frozen, until connect or kill)
                        X.pause(s, s.pause_memory)
                        s.audit("pause", {"why": "timeout", "memory": s.pause_memory})
                    else:
                        self.kill(s, "timeout")
                except Exception:
                    pass

    def ensure_reaper(self) -> None:
        if self._reaper is None:
            with self.lock:
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, name="e2b-reaper", daemon=True)
                    self._reaper.start()

    def close_all(self) -> None:
        self._stop.set()
        with self.lock:
            every = list(self.sandboxes.values())
        for s in every:
            self.kill(s, "server stopped")

    # -- the ASGI app ------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return
        from ..httpheaders import header

        self.ensure_reaper()
        sid = header(scope, "e2b-sandbox-id")
        if sid is None:
            if scope["type"] == "http" and _route(scope) == "/files" and b"signature=" in scope.get("query_string", b""):
                return await self.signed(scope, receive, send)
            return await self.rest(scope, receive, send)
        return await self.envd(scope, receive, send, sid)

    async def signed(self, scope, receive, send):
        """A signed file URL (download_url / upload_url of a secure sandbox): no header names the
        sandbox, the signature does (a sha256 over the path, operation, user, the sandbox's access
        token and the expiry, as E2B's SDK makes it); one expired or matching no sandbox is 401."""
        import base64
        import hashlib
        from urllib.parse import parse_qs

        from starlette.responses import JSONResponse

        q = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        sig, path, user = q.get("signature", ""), q.get("path", ""), q.get("username", "")
        expiry = q.get("signature_expiration")
        op = "write" if scope["method"] == "POST" else "read"
        if expiry is not None:
            if not expiry.lstrip("-").isdigit():
                return await JSONResponse({"code": 400, "message": "bad signature_expiration"}, 400)(scope, receive, send)
            if int(expiry) < time.time():
                return await JSONResponse({"code": 401, "message": "signature is already expired"},
                                          401)(scope, receive, send)
        with self.lock:
            secure = [s for s in self.sandboxes.values() if s.secure and not s.killed]
        for s in secure:
            raw = f"{path}:{op}:{user}:{s.access_token}" + (f":{expiry}" if expiry is not None else "")
            want = "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).rstrip(b"=").decode()
            if hmac.compare_digest(want.encode(), sig.encode()):
                return await self.envd(scope, receive, send, s.id, signed=True)
        return await JSONResponse({"code": 401, "message": "invalid signature"}, 401)(scope, receive, send)

    async def signed_at_root(self, scope, receive, send):
        """/files at the server's root: where E2B's SDK points a signed URL (it keeps the host of
        E2B_SANDBOX_URL and drops its path)."""
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return
        if b"signature=" not in scope.get("query_string", b"") or scope["path"].rstrip("/") != "/files":
            return await JSONResponse({"code": 404, "message": "not found"}, 404)(scope, receive, send)
        return await self.signed(scope, receive, send)

    async def envd(self, scope, receive, send, sid: str, signed: bool = False):
        from starlette.responses import JSONResponse

        from ..httpheaders import header
        from ..serve.gate import Over

        sbx = self.find(sid)
        if sbx is None:  # (what E2B's proxy answers for a sandbox that is not there: the SDK reads 502 so)
            return await JSONResponse({"code": 502, "message": f"sandbox {sid[:60]} not found"},
                                      status_code=502)(scope, receive, send)
        if sbx.paused:  # (E2B's proxy: a paused sandbox answers as one not there, unless it resumes on traffic)
            if not sbx.auto_resume:
                return await JSONResponse({"code": 502, "message": f"sandbox {sid[:60]} is paused"},
                                          status_code=502)(scope, receive, send)
            await anyio.to_thread.run_sync(self.resumed, sbx)
        if sbx.secure and not signed:
            token = header(scope, "x-access-token") or ""
            if not hmac.compare_digest(token.encode(), sbx.access_token.encode()):
                return await JSONResponse({"code": 401, "message": "this sandbox is secure: send its envd access token "
                                           "(X-Access-Token)"}, status_code=401)(scope, receive, send)
        if scope["type"] != "http":
            return
        path = "/files" if signed else _route(scope)
        try:
            slot = self.state.gate.slot(sbx.grant)
        except Over as e:
            return await JSONResponse({"code": 429, "message": str(e)}, status_code=429,
                                      headers={"Retry-After": str(e.retry_after)})(scope, receive, send)
        scope = {**scope, "e2b.sandbox": sbx, "e2b.slot": slot}
        from .envd_services import SandboxGone, dropping

        flag: dict = {}
        dropping.set(flag)

        async def sending(msg):
            if flag.get("drop"):
                raise SandboxGone()
            await send(msg)
        try:
            if path.startswith("/process.Process/"):
                return await self.process(scope, receive, sending)
            if path.startswith("/filesystem.Filesystem/"):
                return await self.filesystem(scope, receive, sending)
            from .files import files_endpoint

            return await files_endpoint(self, sbx, path, scope, receive, send)
        except SandboxGone:  # its connection is dropped, unfinished, as a killed sandbox's is
            return
        finally:
            slot.release()


def _route(scope) -> str:
    """The request's path below /e2b."""
    path, root = scope["path"], scope.get("root_path") or ""
    return path[len(root):] if root and path.startswith(root) else path


# -- keys --------------------------------------------------------------------------------
def runner_key(e2b_key: str) -> str | None:
    """The runner tenant key of an E2B-form key (`e2b_` + hex of the key's bytes), or None."""
    if not e2b_key.startswith("e2b_"):
        return None
    try:
        return bytes.fromhex(e2b_key[4:]).decode("utf-8") or None
    except ValueError:
        return None


def e2b_key(key: str) -> str:
    """A runner tenant key in the form E2B's SDK accepts."""
    return "e2b_" + key.encode("utf-8").hex()


# -- the control plane -------------------------------------------------------------------
def _iso(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def rest_app(e2b: E2B):
    from ..serve import tenants as T
    from ..serve.gate import Over

    state = e2b.state
    app = FastAPI(title="runner serve: E2B API", docs_url=None, redoc_url=None, openapi_url=None)

    from ...errors import RunnerError

    class Err(RunnerError):
        def __init__(self, code: int, message: str, headers: dict | None = None) -> None:
            self.code, self.message, self.headers = code, message, headers or {}

    @app.exception_handler(Err)
    async def _err(request: Request, exc: Err):
        return JSONResponse({"code": exc.code, "message": exc.message}, status_code=exc.code, headers=exc.headers)

    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):  # an unknown route, say (pause: not here yet)
        return JSONResponse({"code": exc.status_code, "message": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(Over)
    async def _over(request: Request, exc: Over):
        return JSONResponse({"code": 429, "message": str(exc)}, status_code=429,
                            headers={"Retry-After": str(exc.retry_after)})

    async def tenant(request: Request):
        from ..httpheaders import header

        key = runner_key(header(request.scope, "x-api-key") or "")
        grant = None
        if key is not None:
            grant = await anyio.to_thread.run_sync(T.authenticate, state.db, key, limiter=state.quick)
        if grant is None:
            raise Err(401, "no valid API key: send X-API-KEY: e2b_<hex of a runner tenant key> (README: E2B)")
        return grant

    def mine(grant, sid: str) -> X.Sandbox:
        s = e2b.find(sid, grant.name)
        if s is None:
            raise Err(404, f"sandbox {sid[:60]} not found")
        return s

    async def body(request: Request) -> dict:
        from ...untrusted.boundedjson import loads

        raw = await request.body()
        try:
            obj = loads(raw) if raw.strip() else {}
        except ValueError as e:
            raise Err(400, f"the body is not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise Err(400, "the body must be a JSON object")
        return obj

    def image_of(grant, template: str) -> str:
        from executors.defaults import DEFAULT_IMAGE

        from ..serve.app import _qualify

        if template in ("base", "runner/base", DEFAULT_IMAGE):
            return _qualify(DEFAULT_IMAGE)
        granted = {_qualify(i) for i in grant.images}
        if _qualify(template) in granted:
            return _qualify(template)
        raise Err(404, f"template {template[:200]!r} not found: `base`, or an image granted to tenant {grant.name} "
                       "(runner tenants add --image)")

    def sandbox_json(s: X.Sandbox) -> dict:
        out = {"templateID": s.template, "sandboxID": s.id, "clientID": s.client_id, "envdVersion": X.ENVD_VERSION,
               "domain": None}
        if s.secure:
            out["envdAccessToken"] = s.access_token
        return out

    def listed(s: X.Sandbox, detail: bool = False) -> dict:
        lim = s.limits
        out = {"templateID": s.template, "sandboxID": s.id, "clientID": s.client_id, "startedAt": _iso(s.started_at),
               "endAt": _iso(s.end_at), "cpuCount": int(max(1, (lim.cpus if lim and lim.cpus else 1))),
               "memoryMB": int(_mb(lim.memory if lim else None)), "diskSizeMB": 0, "state": "paused" if s.paused else "running",
               "envdVersion": X.ENVD_VERSION, "metadata": dict(s.metadata)}
        if detail:
            if s.secure:
                out["envdAccessToken"] = s.access_token
            out["domain"] = None
        return out

    @app.post("/sandboxes", status_code=201)
    async def create(request: Request):
        grant = await tenant(request)
        s = await make(grant, await body(request))
        return JSONResponse(sandbox_json(s), status_code=201)

    async def make(grant, b: dict) -> X.Sandbox:
        template = b.get("templateID")
        if not isinstance(template, str) or not template:
            raise Err(400, "templateID is required")
        from ...controller.snapshots import ID_PREFIX

        snap = None
        if template.startswith(ID_PREFIX):  # a snapshot of the tenant's (E2B: a snapshot is a template)
            snap = await anyio.to_thread.run_sync(snapshot_dir, grant, template, limiter=state.quick)
            image = image_of(grant, snap[1].get("image") or "base")
        else:
            image = image_of(grant, template)
        timeout = b.get("timeout", 15)
        if not isinstance(timeout, int) or timeout < 0:
            raise Err(400, "timeout must be a whole number of seconds")
        meta, envs = b.get("metadata") or {}, b.get("envVars") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for d in (meta, envs) for k, v in d.items()):
            raise Err(400, "metadata and envVars map strings to strings")
        state.gate.session_op(grant)
        release = await anyio.to_thread.run_sync(state.gate.session, grant, "e2b", limiter=state.quick)
        sid = X.new_id()
        now = int(time.time() * 1e6) / 1e6  # whole microseconds, as its RFC 3339 form says
        s = X.Sandbox(id=sid, tenant=grant.name, template=template, policy=grant.default_policy, metadata=dict(meta),
                      envs=dict(envs), secure=bool(b.get("secure", False)), access_token=secrets.token_hex(16),
                      started_at=now, end_at=now + timeout, workspace=await anyio.to_thread.run_sync(
                          _home, state.data, grant.name, limiter=state.quick),
                      release=release)
        s.grant = grant
        s.timeout = timeout
        s.on_timeout = "pause" if b.get("autoPause") else "kill"
        s.pause_memory = b.get("autoPauseMemory") is not False
        ar = b.get("autoResume")
        s.auto_resume = bool(isinstance(ar, dict) and ar.get("enabled")) and s.on_timeout == "pause"
        try:
            with state.gate.slot(grant):
                await anyio.to_thread.run_sync(X.start, s, grant, image, state.data, snap and snap[0],
                                               limiter=state.threads)
        except BaseException as e:
            await anyio.to_thread.run_sync(_discard, e2b, s)
            if isinstance(e, Exception):
                raise Err(500, f"the sandbox could not start: {type(e).__name__}: {e}") from None
            raise
        with e2b.lock:
            e2b.sandboxes[sid] = s
        s.audit("create", {"template": template, "timeout": timeout, "secure": s.secure})
        return s

    def matches(s: X.Sandbox, query: str | None) -> bool:
        if not query:
            return True
        from urllib.parse import parse_qsl

        return all(s.metadata.get(k) == v for k, v in parse_qsl(query, keep_blank_values=True))

    @app.get("/sandboxes")
    async def list_v1(request: Request, metadata: str | None = None):
        grant = await tenant(request)
        return [listed(s) for s in e2b.listing(grant.name) if matches(s, metadata)]

    @app.get("/v2/sandboxes")
    async def list_v2(request: Request):
        grant = await tenant(request)
        q = request.query_params
        states = q.getlist("state")
        wanted = {x for st in states for x in st.split(",")} if states else {"running", "paused"}
        after = _parse_time(q.get("startedAfter"))
        template = q.get("template")
        try:
            limit = int(q.get("limit") or 100)
        except ValueError:
            raise Err(400, "limit must be a whole number") from None
        nextToken = q.get("nextToken")  # noqa: N806 (E2B's name)
        rows = sorted((s for s in e2b.listing(grant.name) if matches(s, q.get("metadata"))
                       and ("paused" if s.paused else "running") in wanted
                       and (after is None or round(s.started_at * 1e6) >= round(after * 1e6)) and (not template or s.template == template)),
                      key=lambda s: (s.started_at, s.id), reverse=q.get("order", "desc") != "asc")
        start = 0
        if nextToken:
            start = next((i + 1 for i, s in enumerate(rows) if s.id == nextToken), len(rows))
        page = rows[start:start + max(1, min(limit, 100))]
        headers = {}
        if start + len(page) < len(rows):
            headers["x-next-token"] = page[-1].id
        return JSONResponse([listed(s) for s in page], headers=headers)

    # before /sandboxes/{sid}, which would take "metrics" for a sandbox id (and answer 404)
    @app.get("/sandboxes/metrics")
    async def many_metrics(request: Request, sandbox_ids: str = ""):
        grant = await tenant(request)
        out = {}
        for sid in [x for x in sandbox_ids.split(",") if x][:100]:
            s = e2b.find(sid, grant.name)
            if s is not None:
                with state.gate.slot(grant):
                    m = await anyio.to_thread.run_sync(_metric, s, limiter=state.threads)
                if m:
                    out[sid] = m
        return {"sandboxes": out}

    @app.get("/sandboxes/{sid}")
    async def info(sid: str, request: Request):
        grant = await tenant(request)
        return listed(mine(grant, sid), detail=True)

    @app.delete("/sandboxes/{sid}", status_code=204)
    async def kill(sid: str, request: Request):
        grant = await tenant(request)
        s = mine(grant, sid)
        state.gate.session_op(grant)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(e2b.kill, s, limiter=state.threads)
        return Response(status_code=204)

    @app.post("/sandboxes/{sid}/timeout", status_code=204)
    async def set_timeout(sid: str, request: Request):
        grant = await tenant(request)
        s = mine(grant, sid)
        t = (await body(request)).get("timeout")
        if not isinstance(t, int) or t < 0:
            raise Err(400, "timeout must be a whole number of seconds")
        s.end_at = time.time() + t
        s.audit("set_timeout", {"timeout": t})
        return Response(status_code=204)

    @app.post("/sandboxes/{sid}/refreshes", status_code=204)
    async def refresh(sid: str, request: Request):
        grant = await tenant(request)
        s = mine(grant, sid)
        d = (await body(request)).get("duration")
        if isinstance(d, int) and d >= 0:
            s.end_at = max(s.end_at, time.time() + d)
        return Response(status_code=204)

    @app.post("/sandboxes/{sid}/connect")
    async def connect(sid: str, request: Request):
        """Connect to a sandbox, resuming it when paused (201 then, 200 when it was running)."""
        grant = await tenant(request)
        s = mine(grant, sid)
        t = (await body(request)).get("timeout")
        if isinstance(t, int) and t >= 0:
            s.timeout = t if s.paused else s.timeout
            s.end_at = max(s.end_at, time.time() + t)
        with state.gate.slot(grant):
            was = await anyio.to_thread.run_sync(e2b.resumed, s, limiter=state.threads)
        s.audit("connect", {"timeout": t})
        return JSONResponse(sandbox_json(s), status_code=201 if was else 200)

    @app.post("/sandboxes/{sid}/resume", status_code=201)
    async def resume(sid: str, request: Request):
        """E2B's older resume: 409 when it runs."""
        grant = await tenant(request)
        s = mine(grant, sid)
        b = await body(request)
        t = b.get("timeout")
        if isinstance(t, int) and t >= 0:
            s.timeout = t
        if b.get("autoPause") is not None:
            s.on_timeout = "pause" if b.get("autoPause") else "kill"
        with state.gate.slot(grant):
            if not await anyio.to_thread.run_sync(e2b.resumed, s, limiter=state.threads):
                raise Err(409, f"sandbox {sid[:60]} is running")
        return JSONResponse(sandbox_json(s), status_code=201)

    @app.post("/sandboxes/{sid}/pause", status_code=204)
    async def pause(sid: str, request: Request):
        """The engine's pause (cgroup freezer): its processes and memory stay, frozen; with
        memory false (filesystem only) its container is removed, its home and /tmp kept, and a
        resume boots a new one (its processes ended). 409 when paused already."""
        grant = await tenant(request)
        s = mine(grant, sid)
        memory = (await body(request)).get("memory", True) is not False
        with state.gate.slot(grant):
            if not await anyio.to_thread.run_sync(X.pause, s, memory, limiter=state.threads):
                raise Err(409, f"sandbox {sid[:60]} is paused already")
        s.audit("pause", {"memory": memory})
        return Response(status_code=204)

    def store(grant):
        from ..serve.state import StateOps

        return StateOps(state).store(grant)

    def snapshot_dir(grant, snap_id: str):
        from ...controller import snapshots as S

        st = store(grant)
        try:
            return S.lookup(snap_id, st), st.meta(snap_id)
        except S.SnapshotError:
            raise Err(404, f"template {snap_id[:80]!r} not found") from None

    async def take(grant, s: X.Sandbox, name: str | None) -> dict:
        from ...controller import snapshots as S

        try:
            with state.gate.slot(grant):
                return await anyio.to_thread.run_sync(X.snapshot, s, store(grant), name, limiter=state.threads)
        except S.OverQuota as e:
            raise Err(e.status, str(e)) from None

    @app.post("/sandboxes/{sid}/snapshots", status_code=201)
    async def new_snapshot(sid: str, request: Request):
        """A snapshot of the sandbox (the tenant's snapshot store and quota, as /v1's): its id is a
        template a new sandbox starts from."""
        grant = await tenant(request)
        s = mine(grant, sid)
        name = (await body(request)).get("name")
        if name is not None and not isinstance(name, str):
            raise Err(400, "name must be a string")
        meta = await take(grant, s, name)
        s.audit("snapshot", {"snapshot": meta["id"]})
        return JSONResponse({"snapshotID": meta["id"], "names": [name] if name else []}, status_code=201)

    @app.get("/snapshots")
    async def list_snapshots(request: Request):
        """The tenant's snapshots taken through E2B (its /v1 snapshots stay /v1's), oldest first,
        paged by nextToken as the sandboxes' list is."""
        grant = await tenant(request)
        q = request.query_params
        try:
            limit = max(1, min(int(q.get("limit") or 100), 100))
        except ValueError:
            raise Err(400, "limit must be a whole number") from None
        metas = await anyio.to_thread.run_sync(store(grant).list, limiter=state.quick)
        rows = [m for m in metas if m.get("e2b") and (not q.get("sandboxID") or m.get("session") == q.get("sandboxID"))
                and (not q.get("name") or m.get("name") == q.get("name"))]
        start = next((i + 1 for i, m in enumerate(rows) if m["id"] == q.get("nextToken")), 0) if q.get("nextToken") else 0
        page = rows[start:start + limit]
        headers = {"x-next-token": page[-1]["id"]} if start + len(page) < len(rows) else {}
        return JSONResponse([{"snapshotID": m["id"], "names": [m["name"]] if m.get("name") else []} for m in page],
                            headers=headers)

    @app.delete("/templates/{template}", status_code=204)
    async def delete_snapshot(template: str, request: Request):
        """A snapshot of the tenant's removed (E2B's delete_snapshot); another's, or none: 404."""
        from ...controller import snapshots as S

        grant = await tenant(request)
        try:
            await anyio.to_thread.run_sync(store(grant).remove, template, limiter=state.quick)
        except S.NoSnapshot:
            raise Err(404, f"template {template[:80]!r} not found") from None
        return Response(status_code=204)

    @app.post("/sandboxes/{sid}/fork", status_code=201)
    async def fork(sid: str, request: Request):
        """count new sandboxes, each from a snapshot of this one taken now (removed once they
        started): its home and /tmp; not its processes."""
        grant = await tenant(request)
        s = mine(grant, sid)
        b = await body(request)
        count, timeout = b.get("count", 1), b.get("timeout", s.timeout)
        if not isinstance(count, int) or not 1 <= count <= 100:
            raise Err(400, "count is 1 to 100")
        if not isinstance(timeout, int) or timeout < 0:
            raise Err(400, "timeout must be a whole number of seconds")
        meta = await take(grant, s, f"fork of {s.id}")
        try:
            out = []
            for _ in range(count):
                try:
                    child = await make(grant, {"templateID": meta["id"], "timeout": timeout,
                                               "metadata": dict(s.metadata), "envVars": dict(s.envs),
                                               "secure": s.secure})
                    child.template = s.template
                    out.append({"sandbox": sandbox_json(child)})
                except Err as e:
                    out.append({"error": {"code": e.code, "message": e.message}})
        finally:
            await anyio.to_thread.run_sync(store(grant).remove, meta["id"], limiter=state.quick)
        s.audit("fork", {"count": count})
        return JSONResponse(out, status_code=201)

    @app.get("/sandboxes/{sid}/metrics")
    async def metrics(sid: str, request: Request):
        """One sample of the sandbox's use, taken now (runner keeps no history of them): none for a
        range (start, end: Unix seconds) that ends before the sandbox started or starts after now."""
        grant = await tenant(request)
        s = mine(grant, sid)
        q = request.query_params
        try:
            start, end = (int(q[k]) if q.get(k) else None for k in ("start", "end"))
        except ValueError:
            raise Err(400, "start and end are Unix seconds") from None
        if (end is not None and end < int(s.started_at)) or (start is not None and start > time.time()):
            return []
        with state.gate.slot(grant):
            m = await anyio.to_thread.run_sync(_metric, s, limiter=state.threads)
        return [m] if m else []

    return app


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    import datetime

    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _mb(size) -> float:
    from executors.models import parse_size

    try:
        return parse_size(size) / (1024 * 1024) if size else 512
    except Exception:
        return 512


def _metric(s: X.Sandbox) -> dict | None:
    """One sample of the container's use, from the engine's stats (one-shot)."""
    from ...backends.docker import DockerBackend

    try:
        st = DockerBackend.stats(s.executor)
    except Exception:
        return None
    cpu, pre = st.get("cpu_stats") or {}, st.get("precpu_stats") or {}
    online = cpu.get("online_cpus") or 1
    dc = (cpu.get("cpu_usage", {}).get("total_usage", 0) - pre.get("cpu_usage", {}).get("total_usage", 0))
    ds = (cpu.get("system_cpu_usage", 0) or 0) - (pre.get("system_cpu_usage", 0) or 0)
    pct = (dc / ds) * online * 100.0 if ds > 0 and dc > 0 else 0.0
    mem = st.get("memory_stats") or {}
    cache = (mem.get("stats") or {}).get("inactive_file", 0)
    now = time.time()
    lim = s.limits
    cpus = int(max(1, lim.cpus if lim and lim.cpus else online))
    ws_used = usage(s.workspace, stop_after=DISK_TOTAL).used  # (no link followed; bounded: the tenant wrote it)
    return {"timestamp": _iso(now), "timestampUnix": int(now), "cpuCount": cpus, "cpuUsedPct": round(pct, 2),
            "memUsed": int(mem.get("usage", 0) - cache), "memTotal": int(mem.get("limit", 0)), "memCache": int(cache),
            "diskUsed": int(ws_used), "diskTotal": DISK_TOTAL}


PREFIX = "e"  # a sandbox's directory: DATA/e2b/TENANT/e<pid>.<start>-<random>/ (runner/controller/piddirs.py)


def _home(data: Path, tenant: str) -> Path:
    """A new sandbox's home (not made yet), in a directory named for this process: a start after
    a kill -9 removes what it left (sweep), and nothing of another live instance's."""
    from ...controller import piddirs

    top = data / "e2b" / tenant
    top.mkdir(parents=True, exist_ok=True, mode=0o755)
    d = Path(piddirs.make(PREFIX, str(top)))
    os.chmod(d, 0o755)
    return d / "home"


def sweep(state) -> None:
    """The sandbox directories of E2B servers that are gone (their containers are removed by
    Sessions.adopt_at_start with the other orphans of a dead server)."""
    from ...controller import piddirs

    top = state.data / "e2b"
    try:
        tenants = [p for p in top.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return
    for d in tenants:
        for path, _why in piddirs.sweep(str(d), PREFIX, dry_run=True):
            state.sessions.remove_workspace(Path(path))


def _discard(e2b: E2B, s: X.Sandbox) -> None:
    s.close()
    e2b.state.sessions.remove_workspace(s.workspace.parent)


def mount(app, state) -> E2B:
    """Serve E2B's API at /e2b of the app (runner/servers/serve/app.py)."""
    e2b = E2B(state)
    state.extra["e2b"] = e2b
    sweep(state)
    app.mount("/e2b", e2b)
    from starlette.routing import Route

    class AtRoot:  # (an object, so that starlette's Route passes it the ASGI call as it is)
        async def __call__(self, scope, receive, send):
            return await e2b.signed_at_root(scope, receive, send)
    app.router.routes.append(Route("/files", AtRoot(), methods=["GET", "POST"]))  # E2B's signed file URLs
    return e2b
