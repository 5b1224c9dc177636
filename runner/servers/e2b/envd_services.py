"""envd's Connect RPC services, process.Process and filesystem.Filesystem, on the connectrpc
runtime's ASGI server, over a sandbox's in-sandbox process (sandbox.Inbox). The messages and
service stubs are generated from envd's published .proto spec (envd/README.md says how)."""
from __future__ import annotations

import asyncio
import base64
import contextvars
import shlex

import anyio.to_thread
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof

from ...errors import RunnerError
from . import sandbox as X
from .envd.filesystem import filesystem_pb as F
from .envd.filesystem.filesystem_connect import FilesystemASGIApplication
from .envd.process import process_pb as P
from .envd.process.process_connect import ProcessASGIApplication

CODES = {"not_found": Code.NOT_FOUND, "exists": Code.ALREADY_EXISTS, "permission": Code.PERMISSION_DENIED,
         "invalid": Code.INVALID_ARGUMENT, "too_large": Code.RESOURCE_EXHAUSTED, "gone": Code.UNAVAILABLE}
WATCH_EVERY = 0.05  # seconds between two reads of a streamed directory watch's events


class SandboxGone(RunnerError):
    """The sandbox went while a stream of it was open: the stream's connection is dropped, not
    ended, as a killed sandbox's is on E2B (the SDK then asks /health and says the sandbox was
    killed). The Connect runtime would send an end message: `dropping` tells the dispatcher's
    send (app.py) to refuse it, and every message after."""


dropping: contextvars.ContextVar[dict | None] = contextvars.ContextVar("e2b_dropping", default=None)


def user_of(headers) -> str:
    """The user the SDK asks for (Basic auth, `user:`); `user` and its uid are the sandbox's only one."""
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("basic "):
        try:
            return base64.b64decode(auth[6:]).decode().split(":", 1)[0] or "user"
        except ValueError:
            return "user"
    return "user"


def check_user(headers) -> None:
    u = user_of(headers)
    if u not in ("user", "1000"):
        raise ConnectError(Code.PERMISSION_DENIED, f"user {u[:40]!r}: runner runs an E2B sandbox's commands and file "
                                                   "operations as its user `user` (uid 1000) only; root is not granted")


def path_of(p: str) -> str:
    if p.startswith("~"):
        p = X.HOME + p[1:]
    if not p.startswith("/"):
        p = X.HOME + "/" + p
    return p


async def ask(sbx: X.Sandbox, op: str, **kw):
    try:
        return await asyncio.wrap_future(sbx.inbox.ask(op, **kw))
    except X.InboxError as e:
        raise ConnectError(CODES.get(e.kind, Code.INTERNAL), str(e)) from None


class Base:
    def __init__(self, e2b) -> None:
        self.e2b = e2b

    def sbx(self, ctx) -> X.Sandbox:
        headers = ctx.request_headers
        s = self.e2b.find(headers.get("e2b-sandbox-id") or "")
        if s is None:
            raise ConnectError(Code.NOT_FOUND, "sandbox not found")
        check_user(headers)
        return s


# -- process.Process ----------------------------------------------------------------------------
def _command_text(cfg) -> str:
    args = list(cfg.args)
    if len(args) >= 2 and args[-2] == "-c" and cfg.cmd.rsplit("/", 1)[-1] in ("bash", "sh"):
        return args[-1]
    return shlex.join([cfg.cmd, *args])


def _refusal(sbx: X.Sandbox, command: str) -> str | None:
    """runner's guard pipeline on the command, as the bash tool it is: None, or why it is refused."""
    from ...controller import guards
    from ...tools.schemas import registry

    r = sbx.runner
    refused = guards.check(r._guards(), guards.Call("bash", registry.get("bash"), {"command": command}))
    return None if refused is None else str(refused.content if isinstance(refused.content, str) else refused.text())


def _event(ev: dict, sbx: X.Sandbox):
    if ev["ev"] == "data":
        data = base64.b64decode(ev["b64"])
        # every stream, the terminal's too, bytes that are not UTF-8 included (a chunk at a time: a
        # secret cut across two chunks is not seen here, unlike /v1's StreamRedactor, which holds
        # back an unfinished line, and so a terminal's prompt)
        data = sbx.runner.redactor.redact_bytes(data)
        return P.ProcessEvent(event=Oneof("data", P.ProcessEvent.DataEvent(output=Oneof(ev["stream"], data))))
    code, sig = int(ev.get("code", -1)), int(ev.get("signal", 0))
    status = f"signal: {'killed' if sig == 9 else sig}" if sig else f"exit status {code}"
    return P.ProcessEvent(event=Oneof("end", P.ProcessEvent.EndEvent(exit_code=code, exited=not sig, status=status)))


class ProcessService(Base):
    async def _stream(self, sbx, pid: int, q: asyncio.Queue, stop, wrap, ctx):
        """The process's events until its end; past the request's deadline (the SDK's `timeout`,
        as Connect's timeout header) the stream ends with DEADLINE_EXCEEDED (the process runs on)."""
        try:
            yield wrap(event=P.ProcessEvent(event=Oneof("start", P.ProcessEvent.StartEvent(pid=pid))))
            while True:
                left = ctx.timeout_ms
                try:
                    ev = await (q.get() if left is None else asyncio.wait_for(q.get(), max(left, 0) / 1000))
                except asyncio.TimeoutError:
                    raise ConnectError(Code.DEADLINE_EXCEEDED, "the command's timeout passed") from None
                if ev.get("gone"):
                    flag = dropping.get()
                    if flag is not None:
                        flag["drop"] = True
                    raise SandboxGone()
                yield wrap(event=_event(ev, sbx))
                if ev["ev"] == "end":
                    return
        finally:
            stop()

    def _queue(self):
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        return q, (lambda ev: loop.call_soon_threadsafe(q.put_nowait, ev))

    async def start(self, request, ctx):
        from ..serve.gate import Over

        sbx = self.sbx(ctx)
        cfg = request.process
        command = _command_text(cfg)
        why = await anyio.to_thread.run_sync(_refusal, sbx, command)
        if why is not None:
            sbx.audit("process.start", {"command": command}, ok=False, text=why)
            raise ConnectError(Code.PERMISSION_DENIED, why)
        try:
            await self.e2b.state.gate.per_minute(sbx.grant)
        except Over as e:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, str(e)) from None
        q, put = self._queue()
        pty = None
        if request.pty is not None and request.pty.size is not None:
            pty = {"cols": request.pty.size.cols, "rows": request.pty.size.rows}
        res = await ask(sbx, "start", watcher=put, cmd=cfg.cmd, args=list(cfg.args), env=dict(cfg.envs),
                        cwd=path_of(cfg.cwd) if cfg.cwd else None, pty=pty,
                        stdin=bool(request.stdin) if request.stdin is not None else False, tag=request.tag)
        pid = res["pid"]
        sbx.audit("process.start", {"command": command, "pid": pid, "pty": pty is not None, "tag": request.tag})

        def stop() -> None:
            inbox = sbx.inbox
            with inbox._lock:
                ws = inbox.watchers.get(pid)
                if ws and put in ws:
                    ws.remove(put)
        async for m in self._stream(sbx, pid, q, stop, P.StartResponse, ctx):
            yield m

    async def _pid(self, sbx, selector) -> int:
        sel = selector.selector if selector is not None else None
        if sel is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "a process selector (pid or tag) is required")
        if sel.field == "pid":
            return int(sel.value)
        procs = (await ask(sbx, "list"))["processes"]
        for p in procs:
            if p.get("tag") == sel.value:
                return p["pid"]
        raise ConnectError(Code.NOT_FOUND, f"process with tag {str(sel.value)[:60]} not found")

    async def connect(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = await self._pid(sbx, request.process)
        procs = (await ask(sbx, "list"))["processes"]
        if not any(p["pid"] == pid for p in procs):
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        q, put = self._queue()
        stop = sbx.inbox.watch(pid, put)
        async for m in self._stream(sbx, pid, q, stop, P.ConnectResponse, ctx):
            yield m

    async def list(self, request, ctx):
        sbx = self.sbx(ctx)
        procs = (await ask(sbx, "list"))["processes"]
        return P.ListResponse(processes=[
            P.ProcessInfo(config=P.ProcessConfig(cmd=p["cmd"], args=p["args"], envs=p.get("envs") or {}, cwd=p.get("cwd")),
                          pid=p["pid"], tag=p.get("tag")) for p in procs])

    async def update(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = await self._pid(sbx, request.process)
        if request.pty is not None and request.pty.size is not None:
            await ask(sbx, "resize", pid=pid, cols=request.pty.size.cols, rows=request.pty.size.rows)
        return P.UpdateResponse()

    async def _input(self, sbx, pid: int, inp) -> None:
        if inp is None or inp.input is None:
            return
        await ask(sbx, "input", pid=pid, b64=base64.b64encode(inp.input.value).decode())

    async def send_input(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = await self._pid(sbx, request.process)
        await self._input(sbx, pid, request.input)
        return P.SendInputResponse()

    async def stream_input(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = None
        async for m in request:
            ev = m.event
            if ev is None:
                continue
            if ev.field == "start":
                pid = await self._pid(sbx, ev.value.process)
            elif ev.field == "data" and pid is not None:
                await self._input(sbx, pid, ev.value.input)
        return P.StreamInputResponse()

    async def send_signal(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = await self._pid(sbx, request.process)
        sig = int(getattr(request.signal, "value", request.signal))
        await ask(sbx, "signal", pid=pid, sig=sig if sig in (9, 15) else 15)
        sbx.audit("process.signal", {"pid": pid, "signal": sig})
        return P.SendSignalResponse()

    async def close_stdin(self, request, ctx):
        sbx = self.sbx(ctx)
        pid = await self._pid(sbx, request.process)
        await ask(sbx, "close_stdin", pid=pid)
        return P.CloseStdinResponse()


# -- filesystem.Filesystem ----------------------------------------------------------------------
TYPES = {"file": F.FileType.FILE, "dir": F.FileType.DIRECTORY, "symlink": F.FileType.SYMLINK}


def entry(e: dict):
    from protobuf.wkt import Timestamp

    secs = float(e.get("mtime") or 0)
    return F.EntryInfo(name=e["name"], type=TYPES.get(e["type"], F.FileType.FILE), path=e["path"], size=e["size"],
                       mode=e["mode"], permissions=e["permissions"], owner=e["owner"], group=e["group"],
                       modified_time=Timestamp(seconds=int(secs), nanos=int((secs % 1) * 1e9)),
                       symlink_target=e.get("symlink_target"), metadata=e.get("metadata") or {})


class FilesystemService(Base):
    async def stat(self, request, ctx):
        sbx = self.sbx(ctx)
        return F.StatResponse(entry=entry((await ask(sbx, "stat", path=path_of(request.path)))["entry"]))

    async def make_dir(self, request, ctx):
        sbx = self.sbx(ctx)
        res = await ask(sbx, "mkdir", path=path_of(request.path))
        if not res["created"]:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {request.path[:200]} already exists")
        sbx.audit("files.make_dir", {"path": request.path})
        return F.MakeDirResponse(entry=entry(res["entry"]))

    async def move(self, request, ctx):
        sbx = self.sbx(ctx)
        res = await ask(sbx, "rename", src=path_of(request.source), dst=path_of(request.destination))
        sbx.audit("files.rename", {"source": request.source, "destination": request.destination})
        return F.MoveResponse(entry=entry(res["entry"]))

    async def list_dir(self, request, ctx):
        sbx = self.sbx(ctx)
        res = await ask(sbx, "list_dir", path=path_of(request.path), depth=request.depth or 1)
        return F.ListDirResponse(entries=[entry(e) for e in res["entries"]])

    async def remove(self, request, ctx):
        sbx = self.sbx(ctx)
        await ask(sbx, "remove", path=path_of(request.path))
        sbx.audit("files.remove", {"path": request.path})
        return F.RemoveResponse()

    async def _events(self, sbx, wid: int, entries: bool) -> list:
        kinds = {"create": F.EventType.CREATE, "write": F.EventType.WRITE, "remove": F.EventType.REMOVE,
                 "rename": F.EventType.RENAME, "chmod": F.EventType.CHMOD}
        res = await ask(sbx, "watch_read", wid=wid, entries=entries)
        return [F.FilesystemEvent(name=e["name"], type=kinds[e["type"]],
                                  entry=entry(e["entry"]) if entries and e.get("entry") else None)
                for e in res["events"]]

    async def watch_dir(self, request, ctx):
        sbx = self.sbx(ctx)
        wid = (await ask(sbx, "watch_start", path=path_of(request.path), recursive=request.recursive))["wid"]
        try:
            yield F.WatchDirResponse(event=Oneof("start", F.WatchDirResponse.StartEvent()))
            while not sbx.killed:
                for ev in await self._events(sbx, wid, request.include_entry):
                    yield F.WatchDirResponse(event=Oneof("filesystem", ev))
                await asyncio.sleep(WATCH_EVERY)
        finally:
            if not sbx.killed:
                sbx.inbox.ask("watch_stop", wid=wid)

    async def create_watcher(self, request, ctx):
        sbx = self.sbx(ctx)
        wid = (await ask(sbx, "watch_start", path=path_of(request.path), recursive=request.recursive))["wid"]
        key = X.new_id()
        sbx.watchers[key] = (wid, request.include_entry)
        return F.CreateWatcherResponse(watcher_id=key)

    async def get_watcher_events(self, request, ctx):
        sbx = self.sbx(ctx)
        w = sbx.watchers.get(request.watcher_id)
        if w is None:
            raise ConnectError(Code.NOT_FOUND, "watcher not found")
        return F.GetWatcherEventsResponse(events=await self._events(sbx, w[0], w[1]))

    async def remove_watcher(self, request, ctx):
        sbx = self.sbx(ctx)
        w = sbx.watchers.pop(request.watcher_id, None)
        if w is not None:
            await ask(sbx, "watch_stop", wid=w[0])
        return F.RemoveWatcherResponse()


def process_app(e2b):
    return ProcessASGIApplication(ProcessService(e2b))


def filesystem_app(e2b):
    return FilesystemASGIApplication(FilesystemService(e2b))
