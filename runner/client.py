"""RemoteRunner: the Runner's API (runner/controller/interface.py) against a `runner serve`, so
moving an agent from local to hosted is one line:

    with RemoteRunner("http://127.0.0.1:8700", key) as r:    # was: with Runner(...) as r:
        res = r.call("read", {"path": "a.txt"})

    r = RemoteRunner(url, key, session="s1a2...")            # reattach to a session by its id

Standard library only (http.client): `runner call --server` imports none of the service's
libraries. A tool's failure is a ToolResult with is_error, as locally; so is the tenant's rate
limit (429, `retry_after` in meta); file operations raise the built-in FileNotFoundError,
IsADirectoryError, NotADirectoryError and PermissionError, as locally; anything else the server
refuses raises RunnerError with its reason.

Every call is a streaming request (calls?stream=true): its output goes to on_output as the server
relays it, and closing the request (cancel, close, Ctrl-C) makes the server stop the call, its
sandbox removed under it, as a local cancel does; cancel and Ctrl-C then wait for a request the
server answers in the session's turn, so the call has ended when they return or raise.
"""
from __future__ import annotations

import errno
import http.client
import json
import socket
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable

from .controller.interface import ToolRunner
from .errors import ErrorType, RunnerError
from .results import ToolResult

if TYPE_CHECKING:
    from .tools.schemas.registry import ToolSpec


class RemoteRunner(ToolRunner):
    def __init__(self, url: str, key: str, policy: str | None = None, *, session: str | None = None,
                 timeout: float = 600.0, sandbox: str | None = None, snapshot: str | None = None) -> None:
        """session: the id of an open session of this tenant to use (start() checks it is open);
        else start() opens one under `policy` (the tenant's default when None), from `snapshot`
        (a snapshot id of the tenant's) when given. close() ends the session either way; detach()
        leaves it open. sandbox: for a session it opens, "session" (the server's default: one
        sandbox for the session's life) or "per-call" (a fresh one per call); `note` says, once
        started, what carries over."""
        self.url = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RunnerError(f"{url!r} is not an http:// or https:// URL of a runner serve")
        self._where = (parts.scheme, parts.hostname, parts.port, parts.path.rstrip("/"))
        self.key = key
        self.policy = policy
        self.sandbox = sandbox
        self.timeout = timeout
        self.snapshot_id = snapshot  # a session it opens starts from this snapshot of the tenant's

        self.session_id: str | None = session
        self.note: str | None = None
        self._checked = False  # the session given was found open
        self._lock = threading.Lock()
        self._inflight: dict[str, http.client.HTTPConnection] = {}  # call id -> its request (cancel)
        self._cancelled: set[str] = set()
        self._ids = 0
        self._closing = False


    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "RemoteRunner":
        if self.session_id is None:
            body = {k: v for k, v in (("policy", self.policy), ("sandbox", self.sandbox),
                                      ("snapshot", self.snapshot_id)) if v}
            made = self._request("POST", "/v1/sessions", body)
            self.session_id, self.note = made["id"], made.get("note")
            self._checked, self._closing = True, False
        elif not self._checked:
            info = self._request("GET", f"/v1/sessions/{self._sid()}")
            self.policy = self.policy or info.get("policy")
            self.sandbox = self.sandbox or info.get("sandbox")
            self._checked = True
        return self

    # -- state: pause, resume, snapshots, forks -------------------------------------------
    def pause(self) -> bool:
        """As Runner.pause: the session's sandbox frozen until resume() or the next call."""
        self.start()
        self._request("POST", f"/v1/sessions/{self.session_id}/pause")
        return True

    def resume(self) -> bool:
        self.start()
        self._request("POST", f"/v1/sessions/{self.session_id}/resume")
        return True

    def snapshot(self, name: str | None = None) -> str:
        """As Runner.snapshot: the id of a snapshot of the session taken now (the tenant's)."""
        self.start()
        return self._request("POST", f"/v1/sessions/{self.session_id}/snapshots", {"name": name})["id"]

    def fork(self, n: int = 1) -> list["RemoteRunner"]:
        """As Runner.fork: n new sessions from a snapshot of this one taken now, each a RemoteRunner."""
        self.start()
        ids = self._request("POST", f"/v1/sessions/{self.session_id}/fork", {"count": n})["sessions"]
        out = []
        for sid in ids:
            out.append(RemoteRunner(self.url, self.key, self.policy, session=sid, timeout=self.timeout))
        return out

    def close(self) -> None:
        """End the session (its sandbox and workspace are removed); a call under way ends at once."""
        self._closing = True
        self.cancel()
        sid, self.session_id = self.session_id, None
        if sid is not None:
            try:
                self._request("DELETE", f"/v1/sessions/{urllib.parse.quote(sid, safe='')}")
            except RunnerError as e:
                if "410" not in str(e):
                    raise

    def detach(self) -> str | None:
        """Let go of the session without ending it: its id, for RemoteRunner(..., session=ID)."""
        sid, self.session_id = self.session_id, None
        return sid

    def _sid(self) -> str:
        return urllib.parse.quote(self.session_id or "", safe="")

    # -- tools --------------------------------------------------------------------------
    def tools(self) -> "list[ToolSpec]":
        """The specs of the session's policy's tools (ToolSpecs, as Runner.tools gives)."""
        from .tools.schemas.declared import of

        if self.session_id is not None:
            self.start()  # a session reattached to: its policy's tools
        q = f"?policy={urllib.parse.quote(self.policy)}" if self.policy else ""
        return [of(d) for d in self._request("GET", "/v1/tools" + q)]

    def call(self, tool: str, args: dict | None = None, *, call_id: str | None = None,
             on_output: Callable[[str], None] | None = None) -> ToolResult:
        """As Runner.call. on_output: given a streaming tool's output as the server relays it (the
        `output` events of calls?stream=true: redacted, the newest kept if this reader falls
        behind), on this thread; one that raises is given nothing more, and the result's meta
        says `on_output_error`. call_id: the name cancel() knows this call by, here (the server
        numbers its calls itself: the result's meta call_id)."""
        self.start()
        with self._lock:
            if call_id is None:
                self._ids += 1
                call_id = f"r{self._ids}"
            if call_id in self._inflight:
                raise RunnerError(f"a call with id {call_id!r} is under way")
        relay = _Guarded(on_output)
        try:
            out = self._request("POST", f"/v1/sessions/{self._sid()}/calls?stream=true",
                                {"tool": tool, "args": args or {}}, events=relay, call_id=call_id)
        except KeyboardInterrupt:  # its request is closed: the server stops the call; wait for that
            self._settled()
            raise
        except _RateLimited as e:
            return ToolResult.error(str(e), error_type=ErrorType.GATED, retry_after=e.retry_after)
        except (RunnerError, OSError, http.client.HTTPException):
            with self._lock:
                cancelled = call_id in self._cancelled
                self._cancelled.discard(call_id)
            if not cancelled:
                raise
            return ToolResult.error(
                "the session was closed during this call: the server stops it with its sandbox" if self._closing
                else "the call was cancelled: the server stops its processes with its sandbox; the next call gets a "
                     "fresh sandbox (the workspace is kept)", error_type=ErrorType.EXECUTION, cancelled=True)
        with self._lock:
            self._cancelled.discard(call_id)
        res = ToolResult.model_validate(out)
        if relay.error is not None:
            res.meta["on_output_error"] = relay.error
        return res

    def update_policy(self, changes: dict) -> dict:
        """As Runner.update_policy, within the tenant's grant (PATCH /v1/sessions/{id}/policy)."""
        self.start()
        return self._request("PATCH", f"/v1/sessions/{self._sid()}/policy", changes)

    def cancel(self, call_id: str | None = None) -> bool:
        """Stop the call under way (the one of call_id when given; else every call of this
        RemoteRunner under way), from any thread: its request is closed, and the server stops the
        call, its sandbox removed under it, before this returns. False when there is none."""
        with self._lock:
            ids = [call_id] if call_id is not None else list(self._inflight)
            conns = [(i, self._inflight[i]) for i in ids if i in self._inflight]
            self._cancelled.update(i for i, _ in conns)
        for _, conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # the reading thread wakes at once
                except OSError:
                    pass
        if conns:
            self._settled()
        return bool(conns)

    def _settled(self) -> None:
        """Return once the server has ended the session's call under way: a request it answers in
        the session's turn (one call at a time), after the call it stopped, with its processes."""
        if self.session_id is None:
            return
        try:
            self._request("GET", f"/v1/sessions/{self._sid()}/files?path=.")
        except RunnerError:  # the session ended, or the tenant is at its cap: nothing to wait for
            pass

    # -- files --------------------------------------------------------------------------
    def put_file(self, path: str, data: bytes) -> None:
        self.start()
        self._request("PUT", f"/v1/sessions/{self._sid()}/files/{urllib.parse.quote(path)}", raw=data, file=path)

    def get_file(self, path: str) -> bytes:
        self.start()
        return self._request("GET", f"/v1/sessions/{self._sid()}/files/{urllib.parse.quote(path)}", want_raw=True,
                             file=path)

    def list_files(self, path: str = ".") -> list[str]:
        self.start()
        q = urllib.parse.urlencode({"path": path})
        return self._request("GET", f"/v1/sessions/{self._sid()}/files?{q}", file=path)["names"]

    # -- HTTP ---------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        scheme, host, port, _ = self._where
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return cls(host, port, timeout=self.timeout)

    def _request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, want_raw: bool = False,
                 events: "_Guarded | None" = None, call_id: str | None = None, file: str | None = None):
        """The answer's JSON (or bytes: want_raw). events: the answer is a stream of server-sent
        events; its `output` texts go to events, its `result` is the answer, an `error` raises.
        call_id: the request is that call's (cancel closes it). file: a file operation's path
        (its refusals raise the built-in errors)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        what = f"{method} {path.split('?')[0]}"
        conn = self._connection()
        if call_id is not None:
            with self._lock:
                self._inflight[call_id] = conn
        try:
            try:
                conn.request(method, self._where[3] + path, body=data, headers={
                    "Authorization": f"Bearer {self.key}",
                    "Content-Type": "application/octet-stream" if raw is not None else "application/json"})
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                if call_id is not None and call_id in self._cancelled:
                    raise
                raise RunnerError(f"cannot reach runner serve at {self.url}: {e}") from None
            if resp.status >= 400:
                detail = _detail(resp.read())
                if resp.status == 429 and "/calls" in path:
                    raise _RateLimited(detail, float(resp.getheader("Retry-After") or 1))
                if file is not None:
                    err = _file_error(resp.status, detail, file)
                    if err is not None:
                        raise err
                raise RunnerError(f"{self.url} answered {resp.status} to {what}: {detail}")
            if events is not None:
                return _result_of_events(resp, events, f"{self.url} {what}")
            payload = resp.read()
        finally:
            if call_id is not None:
                with self._lock:
                    self._inflight.pop(call_id, None)
            conn.close()
        if want_raw:
            return payload
        return json.loads(payload) if payload else None


class _Guarded:
    """A caller's on_output: dropped at its first exception, which is kept for the result's meta."""

    def __init__(self, fn: Callable[[str], None] | None) -> None:
        self.fn, self.error = fn, None

    def __call__(self, text: str) -> None:
        if self.fn is None or not text:
            return
        try:
            self.fn(text)
        except Exception as e:
            self.fn, self.error = None, f"{type(e).__name__}: {e}"[:500]


def _result_of_events(resp, on_output: _Guarded, what: str) -> dict:
    """Read `event:`/`data:` blocks (runner serve's, one JSON line of data each) until the result."""
    name = data = None
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif not line and name is not None:
            if name == "output":
                on_output(data.get("text", "") if isinstance(data, dict) else "")
            elif name == "result":
                return data
            elif name == "error":
                raise RunnerError(f"{what}: {data.get('detail') if isinstance(data, dict) else data}")
            name = data = None
    raise RunnerError(f"{what}: the event stream ended before the call's result")


class _RateLimited(RunnerError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _detail(body: bytes) -> str:
    try:
        d = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return body[:500].decode("utf-8", "replace")
    if isinstance(d, list):  # a 422's [{loc, msg, type}]
        return "; ".join(str(e.get("msg")) if isinstance(e, dict) else str(e) for e in d)[:1000]
    return d if isinstance(d, str) else json.dumps(d)[:1000]


def _file_error(status: int, detail: str, path: str) -> OSError | None:
    """The built-in error a local Runner raises for what the server's file routes refused."""
    low = detail.lower()
    if status == 404 and low.startswith(("no file", "no directory")):
        return FileNotFoundError(errno.ENOENT, "no such file or directory", path)
    if status == 403:
        return PermissionError(errno.EACCES, detail, path)
    if status == 422 and "is a directory" in low:
        return IsADirectoryError(errno.EISDIR, "is a directory", path)
    if status == 422 and "not a directory" in low:
        return NotADirectoryError(errno.ENOTDIR, "not a directory", path)
    return None
