"""`runner serve`'s routes of state that holds: pause and resume, snapshots, sessions made from
them, forks (runner/controller/snapshots.py does the work).

    POST   /v1/sessions/{id}/pause       204          POST /v1/sessions/{id}/resume   204
    POST   /v1/sessions/{id}/snapshots   201 {"id", ...}  {"name"} optional
    GET    /v1/snapshots                 {"snapshots": [{id, name, size, age, ...}]}
    GET    /v1/snapshots/{id}            its metadata;  DELETE /v1/snapshots/{id}  204
    POST   /v1/sessions/{id}/fork        201 {"sessions": [ids]}  {"count": n}
    POST   /v1/sessions {"snapshot": ID, "volumes": {NAME: "/path[:ro]"}}  (app.py's route calls new_session)
    POST   /v1/volumes {"name"} 201;  GET /v1/volumes;  DELETE /v1/volumes/{name} 204 (409 while mounted)

A tenant's snapshots live under <data>/snapshots/<tenant>/; another tenant's answer 404. The
number and the bytes a tenant keeps are capped (429 past the number, 413 past the bytes).
`StateOps` holds the work, callable from another route module (the E2B surface) as well.
"""
from __future__ import annotations

import os
from pathlib import Path

from fastapi import Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ...controller import snapshots as S
from . import tenants as T
from .apidoc import SESSION, Forked, SnapshotList, SnapshotMeta, VolumeInfo, VolumeList, doc

DEFAULT_QUOTA = S.Quota(count=int(os.environ.get("RUNNER_SERVE_MAX_SNAPSHOTS", "50")),
                        bytes=int(os.environ.get("RUNNER_SERVE_MAX_SNAPSHOT_BYTES", str(20 << 30))))
MAX_FORKS = 20


class SnapshotIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=200)


class ForkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(default=1, ge=1, le=MAX_FORKS)


class BadRequest(S.SnapshotError):
    """A request the server cannot take as it is (422)."""


class VolumeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=T.NAME_RE.pattern, description="1-40 of a-z, 0-9, _ and -, a letter or digit first")


class StateOps:
    """The work of the routes, on the server's Sessions (blocking: run it on a worker thread)."""

    def __init__(self, state) -> None:
        self.state = state
        self.sessions = state.sessions

    def store(self, grant: T.Grant) -> S.Store:
        quota = self.state.extra.get("snapshot_quota") or DEFAULT_QUOTA
        return S.Store(self.state.data, grant.name, quota)

    def pause(self, grant: T.Grant, sid: str) -> bool:
        return self.sessions.use(grant, sid).runner.pause()

    def resume(self, grant: T.Grant, sid: str) -> bool:
        return self.sessions.use(grant, sid).runner.resume()

    def snapshot(self, grant: T.Grant, sid: str, name: str | None = None) -> dict:
        live = self.sessions.use(grant, sid)
        return S.take(live.runner, self.store(grant), name)

    def new_session(self, grant: T.Grant, policy: str, snapshot: str | None = None,
                    volumes: dict[str, str] | None = None, start: bool = False, sandbox: str | None = None) -> str:
        """A new session of the tenant: its workspace filled from one of its snapshots (NoSnapshot
        for another tenant's), its /tmp going to its first sandbox (start: made now); the tenant's
        volumes mounted ({NAME: /path or /path:ro}; runner/servers/serve/volumes.py)."""
        from .volumes import Volumes

        try:
            mounts = Volumes.parse(volumes or {})
        except ValueError as e:
            raise BadRequest(str(e)) from None
        snap = None
        if snapshot is not None:
            snap = self.store(grant).path(snapshot)
            if not (snap / S.META).is_file():
                raise S.NoSnapshot(f"no snapshot {snapshot}")
        sid = self.sessions.create(grant, policy, *((sandbox,) if sandbox else ()))
        try:
            if mounts:
                Volumes(self.sessions).attach(grant.name, sid, mounts)
            if snap is not None:
                S.restore_workspace(snap, self.sessions.workspace(grant.name, sid))
                self.sessions.pending_tmp[sid] = snap
            if start:
                self.sessions.use(grant, sid).runner.start()
        except BaseException:
            self.sessions.close(sid, "its snapshot or volumes could not be given it")
            raise
        return sid

    def fork(self, grant: T.Grant, sid: str, count: int) -> list[str]:
        """count new sessions, each from a snapshot of this one taken now, their sandboxes started
        (the snapshot is gone once they have their /tmp)."""
        row = self.sessions.row(grant, sid)
        store = self.store(grant)
        meta = S.take(self.sessions.use(grant, sid).runner, store, f"fork of {sid}")
        made: list[str] = []
        try:
            for _ in range(count):
                made.append(self.new_session(grant, row.policy, meta["id"], sandbox=row.sandbox))
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(count, 8), thread_name_prefix="runner-fork") as pool:
                for f in [pool.submit(lambda new: self.sessions.use(grant, new).runner.start(), new) for new in made]:
                    f.result()  # (their sandboxes started side by side; the first error raised)
        except BaseException:
            for new in made:
                self.sessions.close(new, "its fork did not complete")
            raise
        finally:
            store.remove(meta["id"])
        return made


def register(app, state, *, tenant, working, live_of, problem) -> StateOps:
    """Add the routes to the app (create_app's helpers given: the tenant dependency, the worker
    threads, the session lookup that answers 404/410, and its Problem class)."""
    from .app import parse
    from .sessions import Full, Gone, NotFound

    ops = StateOps(state)
    state.extra["state_ops"] = ops

    from .volumes import NoVolume, Volumes

    async def run(grant, fn, *args):
        """fn on a worker thread, in one of the tenant's places at the gate (as every route)."""
        try:
            with state.gate.slot(grant):
                return await working(fn, *args)
        except BadRequest as e:
            raise problem(422, str(e)) from None
        except (NotFound, S.NoSnapshot, NoVolume) as e:
            raise problem(404, str(e)) from None
        except Gone as e:
            raise problem(410, str(e)) from None
        except S.OverQuota as e:
            raise problem(e.status, str(e), {"Retry-After": "60"} if e.status == 429 else None) from None
        except Full as e:
            raise problem(429, str(e), {"Retry-After": "5"}) from None
        except S.SnapshotError as e:
            raise problem(409, str(e)) from None

    @app.post("/v1/sessions/{sid}/pause", status_code=204,
              **doc(None, {"description": "paused"}, *SESSION, 409, 429, status=204))
    async def pause(sid: str, grant: T.Grant = Depends(tenant)):
        """Freeze the session's sandbox (the engine's pause: no CPU); its next call resumes it."""
        await run(grant, ops.pause, grant, sid)
        return Response(status_code=204)

    @app.post("/v1/sessions/{sid}/resume", status_code=204,
              **doc(None, {"description": "resumed"}, *SESSION, 409, 429, status=204))
    async def resume(sid: str, grant: T.Grant = Depends(tenant)):
        await run(grant, ops.resume, grant, sid)
        return Response(status_code=204)

    @app.post("/v1/sessions/{sid}/snapshots", status_code=201,
              **doc(SnapshotIn, SnapshotMeta, *SESSION, 409, 413, 429, status=201))
    async def snapshot(sid: str, request: Request, grant: T.Grant = Depends(tenant)):
        """Snapshot the session now: its workspace, /tmp, env and cwd (not its processes: see
        the metadata's not_captured)."""
        body = await parse(request, SnapshotIn)
        return await run(grant, ops.snapshot, grant, sid, body.name)

    @app.get("/v1/snapshots", **doc(None, SnapshotList, 429))
    async def list_snapshots(grant: T.Grant = Depends(tenant)):
        return {"snapshots": await run(grant, lambda: ops.store(grant).list())}

    @app.get("/v1/snapshots/{snap}", **doc(None, SnapshotMeta, 404, 429))
    async def show_snapshot(snap: str, grant: T.Grant = Depends(tenant)):
        return await run(grant, lambda: ops.store(grant).meta(snap))

    @app.delete("/v1/snapshots/{snap}", status_code=204,
                **doc(None, {"description": "removed"}, 404, 409, 429, status=204))
    async def delete_snapshot(snap: str, grant: T.Grant = Depends(tenant)):
        await run(grant, lambda: ops.store(grant).remove(snap))
        return Response(status_code=204)

    @app.post("/v1/sessions/{sid}/fork", status_code=201,
              **doc(ForkIn, Forked, *SESSION, 409, 413, 429, status=201))
    async def fork(sid: str, request: Request, grant: T.Grant = Depends(tenant)):
        body = await parse(request, ForkIn)
        state.gate.session_op(grant)
        return {"sessions": await run(grant, ops.fork, grant, sid, body.count)}

    @app.post("/v1/volumes", status_code=201, **doc(VolumeIn, VolumeInfo, 409, 429, status=201))
    async def new_volume(request: Request, grant: T.Grant = Depends(tenant)):
        """A volume of the tenant's, outliving its sessions; mount it with POST /v1/sessions {"volumes": {NAME: /path}}."""
        body = await parse(request, VolumeIn)
        return await run(grant, lambda: Volumes(state.sessions).create(grant.name, body.name))

    @app.get("/v1/volumes", **doc(None, VolumeList, 429))
    async def list_volumes(grant: T.Grant = Depends(tenant)):
        return {"volumes": await run(grant, lambda: Volumes(state.sessions).listing(grant.name))}

    @app.delete("/v1/volumes/{name}", status_code=204,
                **doc(None, {"description": "removed"}, 404, 409, 429, status=204))
    async def delete_volume(name: str, grant: T.Grant = Depends(tenant)):
        await run(grant, lambda: Volumes(state.sessions).remove(grant.name, name))
        return Response(status_code=204)

    ops.run = run  # (app.py's POST /v1/sessions answers a snapshot's errors the same way)
    return ops


def pause_idle(state, now: float | None = None) -> list[str]:
    """The reaper's step under --pause-after: pause this instance's sessions idle that long (the
    engine's pause: no CPU; their next call resumes them). A session whose call runs now is left
    alone (its lock is not waited for). Answers the ids paused now."""
    import time

    from sqlalchemy import select

    from . import db as D

    after = state.extra.get("pause_after") or 0
    sessions = state.sessions
    with sessions._lock:
        live = {sid: lv for sid, lv in sessions.live.items() if not lv.closed and lv.runner.session.paused is None}
    if not after or not live:
        return []
    now = time.time() if now is None else now
    with sessions.db.session() as s:
        idle = set(s.scalars(select(D.SessionRow.id).where(D.SessionRow.id.in_(list(live)),
                                                           D.SessionRow.last_used < now - after)))
    paused = []
    for sid in idle:
        lv = live[sid]
        if not lv.lock.acquire(blocking=False):
            continue  # a call of it runs now
        try:
            if not lv.closed and lv.runner.pause():
                paused.append(sid)
        except Exception:
            pass  # its sandbox went meanwhile: the next call gets a fresh one
        finally:
            lv.lock.release()
    return paused


def hibernated_dir(data: Path, sid: str) -> Path:
    """Where a hibernated session's /tmp waits for its next sandbox (survives a restart)."""
    return Path(data) / "hibernated" / sid


def hibernate_idle(state, now: float | None = None) -> list[str]:
    """The reaper's step under --hibernate-after: a session of this instance idle that long has its
    /tmp packed to disk (<data>/hibernated/<sid>/) and its sandbox removed, freeing its memory;
    its next call (here, or in a server started later) gets a fresh sandbox with that /tmp and the
    same workspace. Its processes end: this engine cannot checkpoint them (README). A session
    whose call runs now is left alone. Answers the ids hibernated now."""
    import time

    from sqlalchemy import select

    from . import db as D

    after = state.extra.get("hibernate_after") or 0
    sessions = state.sessions
    with sessions._lock:
        live = {sid: lv for sid, lv in sessions.live.items() if not lv.closed}
    if not after or not live:
        return []
    now = time.time() if now is None else now
    with sessions.db.session() as s:
        idle = set(s.scalars(select(D.SessionRow.id).where(D.SessionRow.id.in_(list(live)),
                                                           D.SessionRow.last_used < now - after)))
    done = []
    for sid in idle:
        lv = live[sid]
        if not lv.lock.acquire(blocking=False):
            continue
        try:
            runner = lv.runner
            with runner._lock:
                sandbox = runner.session.live_sandbox()
                if sandbox is not None and S._in_container(sandbox):
                    d = hibernated_dir(state.data, sid)
                    d.mkdir(parents=True, exist_ok=True, mode=0o700)
                    if runner.session.paused is not None:
                        runner.session.resume()
                    limit = 2 * int(runner.policy.limits.tmpfs or 256 << 20) + (16 << 20)
                    S._exec(sandbox, S.TMP_TAR_CMD, out=d / S.TMP_TAR, limit=limit)
            sessions._drop(sid)  # (its Runner closed, its container removed; the session stays open)
            done.append(sid)
        except Exception as e:
            import sys

            sys.stderr.write(f"runner serve: hibernating session {sid}: {type(e).__name__}: {e}\n")
        finally:
            lv.lock.release()
    return done
