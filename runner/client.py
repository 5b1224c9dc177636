"""RemoteRunner: the Runner's API against a `runner serve`, so moving an agent from local to hosted
is one line:

    with RemoteRunner("http://127.0.0.1:8700", key) as r:    # was: with Runner(...) as r:
        res = r.call("read", {"path": "a.txt"})

Standard library only (urllib): `runner call --server` imports none of the service's libraries.
A tool's failure is a ToolResult with is_error, as locally; so is the tenant's rate limit (429,
`retry_after` in meta); anything else the server refuses raises RunnerError with its reason.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

from .errors import ErrorType, RunnerError
from .results import ToolResult


class RemoteRunner:
    def __init__(self, url: str, key: str, policy: str | None = None, *, timeout: float = 600.0,
                 snapshot: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.policy = policy
        self.timeout = timeout
        self.snapshot_id = snapshot  # the session starts from this snapshot of the tenant's
        self.session_id: str | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "RemoteRunner":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "RemoteRunner":
        if self.session_id is None:
            body = {"policy": self.policy} if self.policy else {}
            if self.snapshot_id:
                body["snapshot"] = self.snapshot_id
            self.session_id = self._request("POST", "/v1/sessions", body)["id"]
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
            r = RemoteRunner(self.url, self.key, self.policy, timeout=self.timeout)
            r.session_id = sid
            out.append(r)
        return out

    def close(self) -> None:
        sid, self.session_id = self.session_id, None
        if sid is not None:
            try:
                self._request("DELETE", f"/v1/sessions/{sid}")
            except RunnerError as e:
                if "410" not in str(e):
                    raise

    # -- tools --------------------------------------------------------------------------
    def tools(self) -> list[dict]:
        q = f"?policy={urllib.parse.quote(self.policy)}" if self.policy else ""
        return self._request("GET", "/v1/tools" + q)

    def call(self, tool: str, args: dict | None = None, *,
             on_output: Callable[[str], None] | None = None) -> ToolResult:
        """As Runner.call. on_output: given a streaming tool's output as the server relays it (the
        `output` events of calls?stream=true: redacted, the newest kept if this reader falls
        behind), on this thread; one that raises is given nothing more, and the result's meta
        says `on_output_error`."""
        self.start()
        path = f"/v1/sessions/{self.session_id}/calls"
        relay = None if on_output is None else _Guarded(on_output)
        try:
            out = self._request("POST", path + ("?stream=true" if relay else ""), {"tool": tool, "args": args or {}},
                                events=relay)
        except _RateLimited as e:
            return ToolResult.error(str(e), error_type=ErrorType.GATED, retry_after=e.retry_after)
        res = ToolResult.model_validate(out)
        if relay is not None and relay.error is not None:
            res.meta["on_output_error"] = relay.error
        return res

    def put_file(self, path: str, data: bytes) -> None:
        self.start()
        self._request("PUT", f"/v1/sessions/{self.session_id}/files/{urllib.parse.quote(path)}", raw=data)

    def get_file(self, path: str) -> bytes:
        self.start()
        return self._request("GET", f"/v1/sessions/{self.session_id}/files/{urllib.parse.quote(path)}", want_raw=True)

    # -- HTTP ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, want_raw: bool = False,
                 events: "_Guarded | None" = None):
        """The answer's JSON (or bytes: want_raw). events: the answer is a stream of server-sent
        events; its `output` texts go to events, its `result` is the answer, an `error` raises."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.key}",
            "Content-Type": "application/octet-stream" if raw is not None else "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                if events is not None:
                    return _result_of_events(resp, events, f"{self.url} {method} {path.split('?')[0]}")
                payload = resp.read()
        except urllib.error.HTTPError as e:
            detail = _detail(e.read())
            if e.code == 429 and "/calls" in path:
                raise _RateLimited(detail, float(e.headers.get("Retry-After") or 1)) from None
            raise RunnerError(f"{self.url} answered {e.code} to {method} {path.split('?')[0]}: {detail}") from None
        except urllib.error.URLError as e:
            raise RunnerError(f"cannot reach runner serve at {self.url}: {e.reason}") from None
        if want_raw:
            return payload
        return json.loads(payload) if payload else None


class _Guarded:
    """A caller's on_output: dropped at its first exception, which is kept for the result's meta."""

    def __init__(self, fn: Callable[[str], None]) -> None:
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
    for raw in resp:
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
    return d if isinstance(d, str) else json.dumps(d)[:1000]
