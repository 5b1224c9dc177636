"""The HTTP routes of `runner serve` (FastAPI; OpenAPI at /docs).

Every /v1 route but /v1/health needs `Authorization: Bearer KEY`. Status codes: 401 no or
unknown key; 404 no such session for this tenant (another tenant's session included); 410 a
session that ended; 403 a policy or image not granted, or a protected path; 413 a body over the
limit; 422 malformed JSON or fields (naming them); 429 over a quota, with Retry-After; 503 a call
stopped because the server is shutting down.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Request, Security
from fastapi.security import HTTPBearer
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ... import __version__
from ...errors import RunnerError
from ..httpheaders import header
from ..metrics import QUEUED
from ..one_at_a_time import Stoppable, in_turn as one_at_a_time
from . import files as F
from . import tenants as T
from .apidoc import SESSION, ExecOut, FileNames, Health, SessionCreated, SessionInfo, SessionList, ToolResult, ToolSpec, doc
from .db import Database
from .gate import FULL_RETRY_AFTER, Gate, Over, authenticated
from .recent import Recent
from .sessions import SANDBOX_NOTES, Full, Gone, NotFound, Sessions, remove_containers

MAX_BODY = 16 * 1024 * 1024
MAX_FILE_SEND = 64 * 1024 * 1024
EXEC_OUTPUT = 1024 * 1024  # bytes of stdout and of stderr a /v1/exec answer carries
TOUCH_AFTER = 1.0  # a call longer than this records the session as used again when it ends (idle timeouts)


@dataclass
class State:
    db: Database
    data: Path
    sessions: Sessions
    max_body: int = MAX_BODY
    threads: Any = None  # the limiter of tools, files and execs (a session's turn is awaited, not held here)
    quick: Any = None  # the limiter of key checks and database steps: never behind the tools
    tenant_calls: int = 16  # a tenant's calls in flight here at once (429 past it)
    tenant_transfers: int = 4  # of which file uploads and downloads (a body in memory each)
    in_flight: collections.Counter = field(default_factory=collections.Counter)
    transfers: collections.Counter = field(default_factory=collections.Counter)
    session_ops: int = 120  # sessions a tenant may create and delete per minute, here (429 past it)
    ops_seen: dict = field(default_factory=dict)  # tenant -> deque of the times of its last session_ops
    stopping: bool = False  # a shutdown signal came: calls in flight answer 503
    mcp: Any = None  # the /mcp app, when the MCP SDK is installed
    extra: dict = field(default_factory=dict)
    recent: Recent = field(default_factory=Recent)  # the last calls and errors, for the operator page (/ui)
    gate: Gate = field(init=False)  # every tenant cap, for every route

    def __post_init__(self) -> None:
        self.gate = Gate(self)


class Problem(RunnerError):
    def __init__(self, status: int, detail: Any, headers: dict | None = None) -> None:
        self.status, self.detail, self.headers = status, detail, headers or {}


# -- bodies ------------------------------------------------------------------------------------
class NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str | None = Field(default=None, max_length=200, description="one of the tenant's granted policies")
    sandbox: Literal["session", "per-call"] = Field(
        default="session", description="session (the default): one sandbox for the session's life, so files in "
        "/tmp, background processes and the hostname carry over between calls; per-call: a fresh sandbox per call")
    snapshot: str | None = Field(default=None, max_length=64, description="one of the tenant's snapshots: the "
                                 "session starts from it (GET /v1/snapshots)")
    volumes: dict[str, str] | None = Field(default=None, max_length=16, description="the tenant's volumes to mount: "
                                           "{NAME: /path} read-write, or /path:ro")


class CallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)


class ExecIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: str = Field(min_length=1, max_length=300, description="an image the operator granted this tenant")
    cmd: list[str] = Field(min_length=1, max_length=4096)
    timeout: float | None = Field(default=None, gt=0, le=3600, description="seconds (default: limits.timeout of the "
                                  "tenant's default policy; capped by its limits.max_timeout)")
    stdin: str | None = Field(default=None, max_length=1024 * 1024)


async def parse(request: Request, model: type[BaseModel]) -> Any:
    """The body as `model`: bounded JSON (runner/untrusted/boundedjson.py), then pydantic; 422 names the field."""
    from ...untrusted.boundedjson import loads

    raw = await request.body()
    try:
        obj = loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise Problem(422, [{"loc": ["body"], "msg": f"the body is not valid JSON: {e}", "type": "json_invalid"}]) from None
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise Problem(422, [{"loc": ["body", *e_["loc"]], "msg": e_["msg"], "type": e_["type"]}
                            for e_ in e.errors(include_url=False, include_input=False)]) from None


# -- the app -----------------------------------------------------------------------------------
def create_app(state: State) -> FastAPI:
    app = FastAPI(title="runner serve", version=__version__, docs_url=None, redoc_url=None,
                  generate_unique_id_function=lambda route: route.name,  # operationIds a generated client names
                  description="Many tenants' agents run tools in their own sandboxes. Authenticate every /v1 "
                              "route but /v1/health with `Authorization: Bearer KEY` (`runner tenants add`).")
    app.state.runner = state
    try:  # E2B's API at /e2b (runner/servers/e2b/): needs the connectrpc runtime (the `e2b` extra)
        from ..e2b.app import mount as mount_e2b
    except ImportError:
        pass
    else:
        mount_e2b(app, state)
    from .observability import register

    register(app, state)
    from .apidoc import install

    install(app)  # request bodies in the document; /docs from the installed Swagger UI
    from .operator_page import register as operator_page

    operator_page(app, state)  # /ui, behind the operator token
    bearer = HTTPBearer(auto_error=False, description="a tenant's API key (`runner tenants add NAME` prints one)")

    async def blocking(fn, *args):
        return await anyio.to_thread.run_sync(fn, *args, limiter=state.quick)

    async def working(fn, *args):
        return await anyio.to_thread.run_sync(fn, *args, limiter=state.threads)

    async def in_turn(live, fn, *args, abandon: bool = False):
        """fn(*args) on a worker thread once the session's call before it is done."""
        return await one_at_a_time(live, functools.partial(fn, *args), abandon, state.threads)

    @app.exception_handler(_Over)
    async def _over(request: Request, exc: "_Over"):
        return JSONResponse({"detail": f"the request body is over the limit of {state.max_body} bytes"},
                            status_code=413)

    @app.exception_handler(Over)
    async def _past_a_cap(request: Request, exc: Over):
        return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    async def tenant(request: Request, _scheme: Any = Security(bearer)) -> T.Grant:
        grant = await authenticated(state, request.scope)  # (the key read here; the scheme is the document's)
        if grant is None:
            raise Problem(401, "no valid API key: send Authorization: Bearer KEY (`runner tenants add NAME` "
                               "or `runner tenants key NAME` prints one)", {"WWW-Authenticate": "Bearer"})
        return grant

    async def live_of(grant: T.Grant, sid: str):
        try:  # (on the tools' threads: it may make a Runner, or drop one and its containers)
            return await working(state.sessions.use, grant, sid)
        except NotFound as e:
            raise Problem(404, str(e)) from None
        except Gone as e:
            raise Problem(410, str(e)) from None

    def begin_call(grant: T.Grant, sid: str):
        """A call's steps before its turn, in one trip to a thread: the session's Runner and the
        call's id, then its count against the tenant's calls per minute."""
        try:
            live, call_id = state.sessions.use(grant, sid, call=True)
        except NotFound as e:
            raise Problem(404, str(e)) from None
        except Gone as e:
            raise Problem(410, str(e)) from None
        state.gate.minute_passed(grant, T.take_call(state.db, grant))
        return live, call_id

    from .state import register

    ops = register(app, state, tenant=tenant, working=working, live_of=live_of, problem=Problem)

    @app.get("/v1/health", **doc(None, Health, secured=False))
    async def health():
        from sqlalchemy import text

        def ping():
            with state.db.engine.connect() as c:
                c.execute(text("select 1"))
        await blocking(ping)
        return {"status": "ok", "version": __version__, "database": state.db.engine.dialect.name}

    @app.get("/v1/tools", **doc(None, list[ToolSpec], 403, 429))
    async def tools(policy: str | None = None, grant: T.Grant = Depends(tenant)):
        """The tools of one of the tenant's policies (default: its first), as `runner tools --format json`."""
        source = _granted_policy(grant, policy)
        slot = state.gate.slot(grant)

        def specs():
            import tempfile

            from ...controller.core import Runner
            from ...tools.schemas import formats
            from .sessions import own_workspace

            (state.data / "tmp").mkdir(exist_ok=True, mode=0o700)
            empty = Path(tempfile.mkdtemp(prefix="tools-", dir=state.data / "tmp"))  # nobody else's
            try:
                os.chmod(empty, 0o755)
                own_workspace(empty)
                r = Runner(workspace=empty, policy=source, tenant=grant.name)
                try:
                    return json.loads(formats.export(r.tools(), "json"))
                finally:
                    r.close(wait=True)  # (before its workspace is removed)
            finally:
                state.sessions.remove_workspace(empty)
        with slot:
            return await working(specs)

    @app.post("/v1/sessions", status_code=201, **doc(NewSession, SessionCreated, 403, 413, 429, status=201))
    async def new_session(request: Request, grant: T.Grant = Depends(tenant)):
        body = await parse(request, NewSession)
        name = body.policy or grant.default_policy
        _granted_policy(grant, name)
        state.gate.session_op(grant)
        if body.snapshot is not None or body.volumes:  # (runner/servers/serve/state.py)
            sid = await ops.run(grant, ops.new_session, grant, name, body.snapshot, body.volumes, False, body.sandbox)
        else:
            try:
                sid = await blocking(state.sessions.create, grant, name, body.sandbox)
            except Full as e:
                raise Problem(429, str(e), {"Retry-After": str(FULL_RETRY_AFTER)}) from None
        return {"id": sid, "policy": name, "sandbox": body.sandbox, "note": SANDBOX_NOTES[body.sandbox]}

    @app.get("/v1/sessions", **doc(None, SessionList))
    async def list_sessions(grant: T.Grant = Depends(tenant)):
        return {"sessions": await blocking(state.sessions.listing, grant)}

    @app.get("/v1/sessions/{sid}", **doc(None, SessionInfo, *SESSION))
    async def get_session(sid: str, grant: T.Grant = Depends(tenant)):
        try:
            row = await blocking(state.sessions.row, grant, sid)
        except NotFound as e:
            raise Problem(404, str(e)) from None
        except Gone as e:
            raise Problem(410, str(e)) from None
        return {"id": row.id, "policy": row.policy, "sandbox": row.sandbox, "created": row.created,
                "last_used": row.last_used, "calls": row.calls}

    @app.delete("/v1/sessions/{sid}", status_code=204,
                **doc(None, {"description": "ended: its sandbox and workspace removed"}, *SESSION, 429, status=204))
    async def delete_session(sid: str, grant: T.Grant = Depends(tenant)):
        try:
            await blocking(state.sessions.row, grant, sid)
        except NotFound as e:
            raise Problem(404, str(e)) from None
        except Gone as e:
            raise Problem(410, str(e)) from None
        state.gate.session_op(grant)
        with anyio.CancelScope(shield=True):  # (containers and a workspace to remove: the tools' threads)
            await working(state.sessions.close, sid, "deleted")
        return Response(status_code=204)

    @app.post("/v1/sessions/{sid}/calls", **doc(CallIn, {"model": ToolResult, "description": "the ToolResult; with "
                                                       "?stream=true, server-sent `output` events, then `result` "
                                                       "(or `error`)", "content": {"text/event-stream": {
                                                           "schema": {"type": "string"}}}},
                                                  *SESSION, 413, 429, 499, 503))
    async def call(sid: str, request: Request, stream: bool = False, grant: T.Grant = Depends(tenant)):
        """One tool call: 200 and the ToolResult (a tool's failure is `is_error: true`). With
        ?stream=true, bash and exec output arrives as server-sent `output` events, then `result`."""
        body = await parse(request, CallIn)
        slot = state.gate.slot(grant)  # first: finding the session's Runner takes one of the tools' threads
        try:
            live, call_id = await working(begin_call, grant, sid)
        except BaseException:
            slot.release()
            raise
        QUEUED.set(time.monotonic())  # runner_queue_wait_seconds: from here to the call's start on its thread
        if not stream:
            with slot:
                res = await in_turn(live, _run_call, state, sid, live, call_id, body.tool, body.args)
            return JSONResponse(res.model_dump(mode="json"))
        from ..relay import OutputRelay

        relay, stop = OutputRelay(), Stoppable()
        # the call is a task of its own, its slot released when it ends, whether or not the stream is read
        task = asyncio.ensure_future(in_turn(live, _run_call, state, sid, live, call_id, body.tool, body.args, relay.feed,
                                             stop, abandon=True))
        task.add_done_callback(lambda _: relay.close())  # then _sse sends the result
        task.add_done_callback(lambda _: slot.release())
        return StreamingResponse(_sse(relay, stop, task, body.tool, live.runner.redactor.redact),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.put("/v1/sessions/{sid}/files/{path:path}", status_code=204,
             **doc(None, {"description": "written"}, *SESSION, 403, 413, 429, status=204, openapi_extra={
                 "requestBody": {"required": True, "content": {"application/octet-stream": {
                     "schema": {"type": "string", "format": "binary"}}}}}))
    async def put_file(sid: str, path: str, request: Request, grant: T.Grant = Depends(tenant)):
        with state.gate.slot(grant, transfer=True):
            live = await live_of(grant, sid)
            data = await request.body()
            await in_turn(live, _put, live, path, data)
        return Response(status_code=204)

    @app.get("/v1/sessions/{sid}/files/{path:path}",
             **doc(None, {"description": "the file's bytes", "content": {"application/octet-stream": {
                 "schema": {"type": "string", "format": "binary"}}}}, *SESSION, 403, 413, 429))
    async def get_file(sid: str, path: str, grant: T.Grant = Depends(tenant)):
        slot = state.gate.slot(grant, transfer=True)
        try:
            live = await live_of(grant, sid)
            f = await working(_open, live, path)
        except BaseException:
            slot.release()
            raise
        # sent in chunks of FILE_CHUNK bytes (memory per download: one chunk); the slot is
        # released when the last is sent or the client goes away
        return StreamingResponse(_chunks(state, f, slot), media_type="application/octet-stream",
                                 headers={"Content-Length": str(os.fstat(f.fileno()).st_size)})

    @app.get("/v1/sessions/{sid}/files", **doc(None, FileNames, *SESSION, 403, 429))
    async def list_files(sid: str, path: str = ".", grant: T.Grant = Depends(tenant)):
        """The names in a workspace directory (RemoteRunner.list_files): {"names": [...]}, sorted,
        a directory's ending with '/'."""
        with state.gate.slot(grant):
            live = await live_of(grant, sid)
            return {"names": await in_turn(live, _list, live, path)}

    @app.post("/v1/exec", **doc(ExecIn, ExecOut, 403, 413, 429, 499, 503))
    async def exec_(request: Request, grant: T.Grant = Depends(tenant)):
        """A one-shot command in a fresh hardened container (like `runner exec`), in a granted image."""
        body = await parse(request, ExecIn)
        image = _granted_image(grant, body.image)
        run = "exec-" + secrets.token_hex(8)  # the container's runner.session label
        left = threading.Event()  # the client went away: the thread's exec kills its command (cancel)
        with state.gate.slot(grant):
            await state.gate.per_minute(grant)
            work = asyncio.ensure_future(anyio.to_thread.run_sync(_exec, state, grant, image, body, run, left,
                                                                  abandon_on_cancel=True, limiter=state.threads))
            gone = asyncio.ensure_future(_disconnected(request))
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            gone.cancel()
            if not work.done():  # the client went away: stop its command, whenever its container comes
                left.set()
                work.cancel()
                await working(remove_containers, {"runner.session": run, "runner.role": "serve-exec"})
                raise Problem(499, "the client went away; its command was stopped")
            return work.result()

    from .policy_route import register as register_policy  # PATCH /v1/sessions/{sid}/policy

    register_policy(app, state, tenant=tenant, live_of=live_of, in_turn=in_turn)
    return app


def _granted_policy(grant: T.Grant, name: str | None) -> str:
    name = name or grant.default_policy
    if name not in grant.policies:
        raise Problem(403, f"policy {name[:200]!r} is not granted to tenant {grant.name}: choose one of "
                           f"{', '.join(grant.policies)}")
    return grant.policies[name]


def _qualify(image: str) -> str:
    from ...cli.exec_cmd import _qualify as q

    return q(image)


def _granted_image(grant: T.Grant, image: str) -> str:
    granted = {_qualify(i) for i in grant.images}
    if _qualify(image) not in granted:
        shown = ", ".join(sorted(granted)) or "none (the operator grants images with `runner tenants add --image`)"
        raise Problem(403, f"image {image[:300]!r} is not granted to tenant {grant.name}: granted: {shown}")
    return _qualify(image)


# -- calls -------------------------------------------------------------------------------------
def _ended() -> Problem:
    return Problem(410, "this session has ended; its sandbox and workspace were removed: start a new session")


def _stopped() -> Problem:
    return Problem(503, "the server is shutting down: the call was stopped (an open session stays open: retry on "
                        "a running server)", {"Retry-After": str(FULL_RETRY_AFTER)})


def begin_shutdown(state: State) -> None:
    """On a shutdown signal: calls in flight answer 503 and this process's sandboxes and execs
    are removed now, under their calls (which would otherwise hold the shutdown), in a thread."""
    if state.stopping:
        return
    state.stopping = True
    me = str(os.getpid())
    threading.Thread(target=lambda: [remove_containers({"runner.role": role, "runner.owner.pid": me})
                                     for role in ("agent", "serve-exec")]).start()


def _run_call(state: State, sid: str, live, call_id: str, tool: str, args: dict, on_output=None,
              stop: Stoppable | None = None):
    """One call of a session on a worker thread. on_output: Runner.call's (a streaming call's
    relay); stop: the streaming request's, stopped when its client goes away."""
    with live.lock:
        if live.closed:  # ended while this call waited for its turn
            raise _ended()
        if state.stopping:
            raise _stopped()
        r = live.runner
        if stop is not None and not stop.begin(r.session):
            raise Problem(499, "the client went away; its call never ran")
        started, res, failure = time.monotonic(), None, None
        try:
            res = r.call(tool, args, on_output=on_output, call_id=call_id)
        except RunnerError as e:
            failure = e
            if live.closed:  # ended under this call
                raise _ended() from None
            if state.stopping:
                raise _stopped() from None
            raise
        else:
            if state.stopping and res.is_error:  # its sandbox was removed under it (a call that
                raise _stopped()  # finished keeps its answer: a retry would run it twice)
            return res
        finally:
            if stop is not None:
                stop.end()
            try:  # (what the operator page shows never fails a call)
                state.recent.note(r.policy.tenant or "", sid, call_id, tool, started, res, failure)
            except Exception as e:
                sys.stderr.write(f"runner serve: noting a call for /ui: {type(e).__name__}: {e}\n")
            if time.monotonic() - started > TOUCH_AFTER:  # (begin_call recorded its start)
                try:
                    state.sessions.touch(sid)
                except Exception:
                    pass


def _event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _sse(relay, stop: Stoppable, task: asyncio.Future, tool: str, redact):
    """The events of a streaming call: `output` as it comes (its relay is closed when the call's
    task ends), then `result` or `error`."""
    finished = False
    try:
        async for text in relay.chunks():
            yield _event("output", {"text": text})
        try:
            res = task.result()
            yield _event("result", res.model_dump(mode="json"))
        except Problem as e:
            yield _event("error", {"detail": e.detail})
        except Exception as e:
            yield _event("error", {"detail": redact(f"runner could not run {tool}: {type(e).__name__}: {e}")})
        finished = True
    finally:
        if not finished:  # the client went away mid-stream: stop the call (its sandbox goes; the
            # session stays, and its next call gets a fresh sandbox); one still waiting for its turn never runs
            # (a thread, not an await: a cancelled or closed generator cannot wait here)
            task.cancel()
            threading.Thread(target=stop.stop).start()


# -- files -------------------------------------------------------------------------------------
def _put(live, path: str, data: bytes) -> None:
    from ...policy.protect import ProtectedPath
    from ...untrusted.wspath import UnsafePath, usage

    if live.closed:
        raise _ended()
    r = live.runner
    limit = r.policy.limits.max_write
    if limit and len(data) > limit:
        raise Problem(413, f"{len(data)} bytes is more than this session's policy writes at once (max_write "
                           f"{limit} bytes)")
    try:
        rel = "/".join(F.parts(path))
        r.guard.check_writable(r.workspace / rel)
    except UnsafePath as e:
        raise Problem(422, [{"loc": ["path", "path"], "msg": str(e), "type": "value_error"}]) from None
    except ProtectedPath as e:
        raise Problem(403, str(e)) from None
    quota = r.policy.limits.workspace
    if quota and usage(r.workspace, stop_after=quota).used + len(data) > quota:
        raise Problem(413, f"the workspace quota ({quota} bytes) would be exceeded: remove files first")
    with live.lock:
        if live.closed:
            raise _ended()
        st = r.workspace.stat()
        try:
            F.write(r.workspace, path, data, owner=(st.st_uid, st.st_gid))
        except UnsafePath as e:
            raise Problem(422, [{"loc": ["path", "path"], "msg": str(e), "type": "value_error"}]) from None
        except (IsADirectoryError, NotADirectoryError) as e:
            raise Problem(422, [{"loc": ["path", "path"], "msg": f"{path}: {e.strerror}", "type": "value_error"}]) from None
        except OSError as e:  # what the sandbox made of the path, the disk full: an answer, never a 500
            raise _unusable(path, e) from None


FILE_CHUNK = 256 * 1024  # bytes of a download read and sent at a time


async def _chunks(state: State, f, slot):
    """The open file's bytes as its size was when opened (its Content-Length), FILE_CHUNK at a
    time, read on the tools' threads; then it is closed."""
    try:
        left = os.fstat(f.fileno()).st_size
        while left > 0 and (chunk := await anyio.to_thread.run_sync(f.read, min(FILE_CHUNK, left),
                                                                    limiter=state.threads)):
            left -= len(chunk)
            yield chunk
    finally:
        f.close()
        slot.release()


def _open(live, path: str):
    """The workspace file, opened for reading (a regular file, no link followed, within MAX_FILE_SEND)."""
    from ...untrusted.wspath import UnsafePath

    try:
        return F.open_read(live.runner.workspace, path, MAX_FILE_SEND)
    except UnsafePath as e:
        raise Problem(422, [{"loc": ["path", "path"], "msg": str(e), "type": "value_error"}]) from None
    except FileNotFoundError:
        raise Problem(404, f"no file {path[:300]} in the workspace") from None
    except (IsADirectoryError, NotADirectoryError) as e:  # (RemoteRunner raises the same error for it)
        raise Problem(422, [{"loc": ["path", "path"], "msg": f"{path[:300]}: {e.strerror}: not a regular file",
                             "type": "value_error"}]) from None
    except F.TooLarge as e:
        raise Problem(413, str(e)) from None
    except OSError as e:  # whatever else the sandbox made of the path (a directory shut to us, ...): an answer
        raise _unusable(path, e) from None


def _list(live, path: str) -> list[str]:
    from ...untrusted.wspath import UnsafePath

    if live.closed:
        raise _ended()
    try:
        return F.names(live.runner.workspace, path)
    except UnsafePath as e:
        raise Problem(422, [{"loc": ["query", "path"], "msg": str(e), "type": "value_error"}]) from None
    except FileNotFoundError:
        raise Problem(404, f"no directory {path[:300]} in the workspace") from None
    except NotADirectoryError:
        raise Problem(422, [{"loc": ["query", "path"], "msg": f"{path[:300]}: not a directory",
                             "type": "value_error"}]) from None
    except OSError as e:
        raise _unusable(path, e) from None


def _unusable(path: str, e: OSError) -> Problem:
    """The answer for a workspace path the file routes cannot use for a reason the sandbox chose."""
    if isinstance(e, PermissionError):
        return Problem(403, f"{path[:300]}: {e.strerror}")
    return Problem(422, [{"loc": ["path", "path"], "msg": f"{path[:300]}: {e.strerror or e}", "type": "value_error"}])


# -- exec --------------------------------------------------------------------------------------
async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (its body read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _exec(state: State, grant: T.Grant, image: str, body: ExecIn, run: str, left: threading.Event) -> dict:
    """The exec, to its end or until `left` is set (the client went away: its command is killed,
    whether it started before or after that)."""
    from executors.errors import ExecCancelled
    from executors.models import ExecRequest

    from ...backends.docker import DockerBackend
    from ...errors import UsageError
    from ...cli.exec_cmd import ExecOptions, build_config
    from ...policy import load

    policy = load(grant.policies[grant.default_policy])  # the tenant's default policy: its timeout, its
    limits = policy.limits                                  # sandbox's limits and runtime (gVisor, say)
    timeout = min(body.timeout or limits.timeout, limits.max_timeout)
    try:
        cfg = build_config(ExecOptions(cmd=list(body.cmd), image=image, timeout=timeout))
    except UsageError as e:
        raise Problem(422, [{"loc": ["body"], "msg": str(e), "type": "value_error"}]) from None
    cfg = cfg.model_copy(update={"session": run, "labels": {**cfg.labels, "runner.tenant": grant.name,
                                                             "runner.role": "serve-exec"},
                                 "limits": limits.sandbox_limits(), "runtime": policy.sandbox.runtime})
    out = {"stdout": bytearray(), "stderr": bytearray()}
    cut = {"stdout": 0, "stderr": 0}

    def on_output(stream: str, data: bytes) -> None:
        buf = out["stdout" if stream == "stdout" else "stderr"]
        room = EXEC_OUTPUT - len(buf)
        buf += data[:max(room, 0)]
        cut["stdout" if stream == "stdout" else "stderr"] += max(len(data) - max(room, 0), 0)

    try:  # checked before a container is made
        req = ExecRequest(argv=list(body.cmd), timeout=timeout,
                          stdin=body.stdin.encode() if body.stdin is not None else None)
    except ValidationError as e:
        raise Problem(422, [{"loc": ["body", "cmd"], "msg": e_["msg"], "type": e_["type"]}
                            for e_ in e.errors(include_url=False, include_input=False)]) from None
    if state.stopping:
        raise _stopped()
    release = state.gate.session(grant, "exec")  # a running exec counts against the tenant's maximum of sessions
    try:
        try:
            res = DockerBackend.one_shot(cfg, req, on_output=on_output, cancel=left)
        except ExecCancelled:
            raise Problem(499, "the client went away; its command was stopped") from None
    finally:
        release()
    if state.stopping and (res.exit_code < 0 or res.exit_code >= 128):  # killed: its container was
        raise _stopped()  # removed under it (one that ended keeps its answer: a retry would run it twice)
    code = 124 if res.timed_out else (137 if res.oom_killed else res.exit_code)
    return {"exit_code": code, "timed_out": res.timed_out, "oom_killed": res.oom_killed,
            "stdout": out["stdout"].decode("utf-8", "replace"), "stderr": out["stderr"].decode("utf-8", "replace"),
            "truncated": {k: v for k, v in cut.items() if v}}


# -- the size limit ----------------------------------------------------------------------------
class BodyLimit:
    """413 for a request body over the limit, declared (Content-Length) or streamed."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = header(scope, "content-length")
        too_big = JSONResponse({"detail": f"the request body is over the limit of {self.limit} bytes"},
                               status_code=413)
        try:
            if declared is not None and int(declared) > self.limit:
                return await too_big(scope, receive, send)
        except ValueError:
            return await JSONResponse({"detail": "bad Content-Length"}, status_code=400)(scope, receive, send)
        seen = 0
        started = False

        async def counted():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _Over()
            return msg

        async def watch(msg):
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted, watch)
        except _Over:
            if not started:
                await too_big(scope, receive, send)


class _Over(RunnerError):
    pass
