"""The audit log: one JSON line per tool call, in a file that rotates by size.

    log = AuditLog()                       # ~/.local/state/runner/audit.jsonl
    log.record(call_id="c1", tool="bash", session="s1", args={"command": "ls"},
               status="ok", duration_ms=12.5, output_bytes=120)
    log.tail(20); log.show("c1")

Each line: ts, call_id, session, tenant, tool, args (a redacted preview of at most 200
characters), status (ok|error), error_type (gated|validation|execution|timeout|null),
duration_ms, output_bytes, and for errors a redacted `error` preview. Arguments are redacted
before they are cut, so a cut can never expose half a secret the redactor would have caught.

Rotation keeps `keep` old files (audit.jsonl.1 is the newest). Writes are serialised by a
thread lock and, across processes, by flock on a lock file beside the log.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ErrorType
from ..untrusted.printable import json_text, printable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

ENV_AUDIT_LOG = "RUNNER_AUDIT_LOG"
PREVIEW_CHARS = 200
ERROR_TYPES = tuple(str(t) for t in ErrorType)  # the contract of runner.errors
STATUSES = ("ok", "error")
_SHRINK_STR = 4096  # longest string kept from an argument before redaction (the preview is 200)
_SHRINK_ITEMS = 64
_PREVIEW_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # made once, not at each json.dumps


def default_path(environ: dict[str, str] | None = None) -> Path:
    """RUNNER_AUDIT_LOG, else $XDG_STATE_HOME/runner/audit.jsonl, else ~/.local/state/runner/audit.jsonl."""
    env = os.environ if environ is None else environ
    if env.get(ENV_AUDIT_LOG):
        return Path(env[ENV_AUDIT_LOG]).expanduser()
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "runner" / "audit.jsonl"


def _shrink(obj: Any, depth: int = 0) -> Any:
    """A bounded copy of the arguments: enough for a 200-character preview, cheap to redact."""
    if isinstance(obj, str):
        return obj if len(obj) <= _SHRINK_STR else obj[:_SHRINK_STR]
    if depth > 8:
        return "…"
    if isinstance(obj, dict):
        return {str(k)[:_SHRINK_STR]: _shrink(v, depth + 1) for k, v in list(obj.items())[:_SHRINK_ITEMS]}
    if isinstance(obj, (list, tuple)):
        return [_shrink(v, depth + 1) for v in list(obj)[:_SHRINK_ITEMS]]
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj[:_SHRINK_STR]).decode("utf-8", errors="replace")
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return str(obj)[:_SHRINK_STR]


def _cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AuditLog:
    def __init__(self, path: str | os.PathLike | None = None, *, max_bytes: int = 10 * 1024 * 1024, keep: int = 5,
                 redactor=None, environ: dict[str, str] | None = None) -> None:
        """redactor: a runner.reporting.redact.Redactor (built with the policy's secrets); by default one
        with the built-in rules only."""
        if max_bytes <= 0 or keep < 0:
            raise ValueError("max_bytes must be positive and keep not negative")
        self.path = Path(path).expanduser() if path is not None else default_path(environ)
        self.max_bytes = max_bytes
        self.keep = keep
        if redactor is None:
            from .redact import Redactor

            redactor = Redactor()
        self.redactor = redactor
        self._lock = threading.Lock()
        self._fds: tuple[int, int] | None = None  # (lock file, log) kept open between records
        self._log_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the log `_fds` holds
        self._left: int | None = None  # the log's size after this writer's last line (in _log_id)

    @classmethod
    def from_policy(cls, audit_policy, redactor=None, environ: dict[str, str] | None = None) -> "AuditLog | None":
        """An AuditLog as a Policy's `audit` section says, or None when it is disabled."""
        if not audit_policy.enabled:
            return None
        return cls(audit_policy.path, max_bytes=audit_policy.max_bytes, keep=audit_policy.keep,
                   redactor=redactor, environ=environ)

    # -- writing -----------------------------------------------------------------------------
    def preview(self, args: Any) -> str:
        small = self.redactor.redact_obj(_shrink(args))
        try:
            text = _PREVIEW_JSON.encode(small)
        except (TypeError, ValueError):
            text = str(small)
        return _cut(text)

    def record(self, *, call_id: str, tool: str, status: str, session: str | None = None, tenant: str | None = None,
               args: Any = None, error_type: str | None = None, duration_ms: float = 0.0, output_bytes: int = 0,
               error: str | None = None, ts: float | None = None, dialect: str | None = None,
               dialect_tool: str | None = None) -> dict:
        """Append one line and return it as a dict. A call made in a dialect (runner/tools/dialects)
        names the dialect and the tool as the agent called it; `tool` is the native tool that ran."""
        if status not in STATUSES:
            raise ValueError(f"audit status must be ok or error, not {status!r}")
        if status == "ok":
            error_type = None
        elif error_type not in ERROR_TYPES:
            raise ValueError(f"audit error_type must be one of {', '.join(ERROR_TYPES)}, not {error_type!r}")
        when = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
        rec = {
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "call_id": str(call_id),
            "session": session,
            "tenant": tenant,
            "tool": str(tool),
            "args": self.preview(args if args is not None else {}),
            "status": status,
            "error_type": error_type,
            "duration_ms": round(float(duration_ms), 1),
            "output_bytes": int(output_bytes),
        }
        if dialect:
            rec["dialect"], rec["dialect_tool"] = str(dialect), str(dialect_tool)
        if status == "error" and error:
            rec["error"] = _cut(self.redactor.redact(error[:_SHRINK_STR]))
        self._append(json_text(rec) + "\n")  # one line whatever a field holds (U+2028, NEL …)
        return rec

    def record_egress(self, ev: dict, *, session: str | None = None, tenant: str | None = None,
                      ts: float | None = None) -> dict:
        """One line for one request the egress proxy saw (an event of executors/docker/egress_proxy.py):
        tool `egress`, call_id `egress`, status ok (allowed) or error (refused, error_type gated),
        args a preview of host, port, method and path, and an `egress` object: host, port, method,
        path (when intercepted or plain http), bytes_up, bytes_down, decision, reason, intercepted,
        secrets (the brokered ones sent), exfiltration (a placeholder on its way to another host)."""
        allowed = ev.get("decision") == "allowed"
        when = datetime.fromtimestamp(time.time() if ts is None else ts, tz=timezone.utc)
        red = self.redactor.redact

        def text(v, limit=PREVIEW_CHARS):
            return None if v is None else _cut(red(str(v)[:_SHRINK_STR]), limit)

        detail = {
            "host": text(ev.get("host")), "port": ev.get("port") if isinstance(ev.get("port"), int) else None,
            "method": text(ev.get("method"), 16), "path": text(ev.get("path")),
            "bytes_up": int(ev.get("bytes_up") or 0), "bytes_down": int(ev.get("bytes_down") or 0),
            "decision": "allowed" if allowed else "refused", "reason": text(ev.get("reason")),
            "intercepted": bool(ev.get("intercepted")), "secrets": [text(n, 64) for n in ev.get("secrets") or []],
            "exfiltration": bool(ev.get("exfiltration")), "client": text(ev.get("client"), 64),
        }
        if isinstance(ev.get("unlisted"), int) and ev["unlisted"] > 0:  # requests past the proxy's audit budget
            detail["unlisted"] = ev["unlisted"]
        rec = {
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "call_id": "egress",
            "session": session,
            "tenant": tenant,
            "tool": "egress",
            "args": self.preview({k: detail[k] for k in ("host", "port", "method", "path") if detail[k] is not None}),
            "status": "ok" if allowed else "error",
            "error_type": None if allowed else "gated",
            "duration_ms": 0.0,
            "output_bytes": detail["bytes_down"],
            "egress": detail,
        }
        if not allowed and detail["reason"]:
            rec["error"] = detail["reason"]
        self._append(json_text(rec) + "\n")
        return rec

    def record_result(self, *, call_id: str, tool: str, args: Any, result, session: str | None = None,
                      tenant: str | None = None, duration_ms: float | None = None, dialect: str | None = None,
                      dialect_tool: str | None = None) -> dict:
        """record() from a ToolResult: status from is_error, error_type from meta (execution when
        it says none), output_bytes from its text, duration from meta['duration_ms'] if not given."""
        text = result.text
        meta = result.meta or {}
        if duration_ms is None:
            duration_ms = float(meta.get("duration_ms") or 0.0)
        et = meta.get("error_type") if result.is_error else None
        if result.is_error and et not in ERROR_TYPES:
            et = "execution"
        return self.record(call_id=call_id, tool=tool, args=args, session=session, tenant=tenant,
                           status="error" if result.is_error else "ok", error_type=et, duration_ms=duration_ms,
                           output_bytes=len(text.encode("utf-8", errors="replace")),
                           error=text if result.is_error else None, dialect=dialect, dialect_tool=dialect_tool)

    def _append(self, line: str) -> None:
        """One line at the end of the log, under the thread lock and the flock that other
        processes writing the same log take too. The descriptors stay open between records
        (an open, a mkdir, two closes less per call); the path is looked at every time, so a log
        rotated by another process, or removed, is opened anew before the line goes in."""
        data = line.encode("utf-8")
        with self._lock:
            if self._fds is None:
                self._open()
            self._flock(True)
            try:
                try:
                    st = os.stat(self.path)
                except FileNotFoundError:  # removed, with its directory perhaps: the lock file too
                    self._flock(False)
                    self._close_fds()
                    self._open()
                    self._flock(True)
                    st = os.fstat(self._fds[1])
                end = st.st_size
                if (st.st_dev, st.st_ino) != self._log_id:  # another process rotated it
                    self._reopen_log()  # and may have filled the new log since: its size counts too
                    st, end = os.fstat(self._fds[1]), None
                if st.st_size and st.st_size + len(data) > self.max_bytes:
                    self._rotate()
                    self._reopen_log()
                    end = None
                # the log as this writer left it (no other writer since): it ends in our whole line
                whole = end is not None and end == self._left
                self._left = None  # until the line is in: a failed write leaves its end unknown
                self._left = _write_whole_line(self._fds[1], data, end, whole)
            finally:
                self._flock(False)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(str(self.path) + ".lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._fds = (lock_fd, -1)
        self._reopen_log()

    def _reopen_log(self) -> None:
        lock_fd, old = self._fds
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if old >= 0:
            os.close(old)
        st = os.fstat(fd)
        self._fds, self._log_id, self._left = (lock_fd, fd), (st.st_dev, st.st_ino), None

    def _flock(self, exclusive: bool) -> None:
        """Take (or release) the lock that writers of this log in other processes take too."""
        if fcntl is not None and self._fds is not None:
            fcntl.flock(self._fds[0], fcntl.LOCK_EX if exclusive else fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the log's descriptors (a later record opens them again)."""
        with self._lock:
            self._close_fds()

    def _close_fds(self) -> None:
        fds, self._fds, self._log_id, self._left = self._fds, None, None, None
        for fd in fds or ():
            if fd >= 0:
                os.close(fd)

    def _rotate(self) -> None:
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
            return
        self._numbered(self.keep).unlink(missing_ok=True)
        for i in range(self.keep - 1, 0, -1):
            src = self._numbered(i)
            if src.exists():
                os.replace(src, self._numbered(i + 1))
        os.replace(self.path, self._numbered(1))

    def _numbered(self, i: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{i}")

    # -- reading -----------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """The log files, newest first: audit.jsonl, audit.jsonl.1, …"""
        out = [self.path] if self.path.exists() else []
        i = 1
        while self._numbered(i).exists():
            out.append(self._numbered(i))
            i += 1
        return out

    @staticmethod
    def _read(path: Path) -> Iterator[dict]:
        from ..untrusted.boundedjson import loads

        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        rec = loads(line)
                    except ValueError:
                        continue  # a torn line (a crash mid-write) is skipped, not fatal
                    if isinstance(rec, dict):
                        yield rec
        except FileNotFoundError:
            return

    def tail(self, n: int = 20, match: Callable[[dict], bool] | None = None, files: list[Path] | None = None
             ) -> list[dict]:
        """The last n records (of those `match` accepts), oldest first."""
        if n <= 0:
            return []
        got: deque[dict] = deque(maxlen=n)
        chunks: list[list[dict]] = []
        have = 0
        for f in self.files() if files is None else files:
            part = deque((r for r in self._read(f) if match is None or match(r)), maxlen=n - have)
            chunks.append(list(part))
            have += len(part)
            if have >= n:
                break
        for part in reversed(chunks):
            got.extend(part)
        return list(got)

    def follow(self, n: int = 20, match: Callable[[dict], bool] | None = None, poll: float = 0.25,
               stop: Callable[[], bool] | None = None) -> Iterator[dict]:
        """The last n records `match` accepts, then each one as it is appended, for ever (or until
        stop() is true), across rotations: `runner audit tail -f`. No record is given twice or
        skipped between the two: the log read for the last n is the one then followed."""
        from ..untrusted.boundedjson import loads

        def accepted(raw: bytes) -> dict | None:
            try:
                rec = loads(raw.decode("utf-8", "replace"))
            except ValueError:
                return None
            return rec if isinstance(rec, dict) and (match is None or match(rec)) else None

        f, ident, buf, first = None, None, b"", True
        while stop is None or not stop():
            if f is None:
                try:
                    f = open(self.path, "rb")
                except FileNotFoundError:
                    if first:  # nothing yet: the rotated files' last records, then wait for the log
                        yield from self.tail(n, match, self.files()[1:] if self.path.exists() else self.files())
                        first = False
                    time.sleep(poll)
                    continue
                st = os.fstat(f.fileno())
                ident = (st.st_dev, st.st_ino)
            chunk = f.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                recs = [r for r in (accepted(x) for x in lines if x.strip()) if r is not None]
                if first:  # the log as it was: its last n, with the rotated files' before when it has fewer
                    first = False
                    recs = recs[-n:] if n > 0 else []
                    if len(recs) < n:
                        recs = self.tail(n - len(recs), match, self.files()[1:]) + recs
                yield from recs
                continue
            if first:
                first = False
                yield from self.tail(n, match, self.files()[1:])
            try:
                st = os.stat(self.path)
                moved = (st.st_dev, st.st_ino) != ident
            except FileNotFoundError:
                moved = True
            if moved:  # rotated (or removed): the old file's last lines, the files rotated after it, the new one
                buf += f.read()
                *lines, _ = (buf + b"\n").split(b"\n")
                yield from (r for r in (accepted(x) for x in lines if x.strip()) if r is not None)
                f.close()
                newer = self.files()[1:]
                for i, p in enumerate(newer):
                    try:
                        pst = os.stat(p)
                    except FileNotFoundError:
                        continue
                    if (pst.st_dev, pst.st_ino) == ident:  # ours, now p: those before it came after it
                        for q in reversed(newer[:i]):
                            yield from (r for r in self._read(q) if match is None or match(r))
                        break
                f, buf = None, b""
                continue
            time.sleep(poll)
        if f is not None:
            f.close()

    def show(self, call_id: str) -> list[dict]:
        """Every record of that call id (ids repeat across sessions), oldest first."""
        out: list[dict] = []
        for f in reversed(self.files()):
            out += [r for r in self._read(f) if r.get("call_id") == call_id]
        return out


TORN_TAIL_MAX = 1024 * 1024  # looked back for the last newline; a record is far shorter


def _write_whole_line(fd: int, data: bytes, end: int | None = None, whole: bool = False) -> int:
    """Append one line so that the file only ever ends in whole lines, under the log's flock;
    return the file's size after it. end: the size, if known; whole: it ends in a whole line
    (this writer's last, and the size has not changed since), so its last byte is not read.

    A writer killed mid-write (SIGKILL, power loss) can leave part of a line at the end: the next
    writer cuts that tail off before it appends. A short write or a failed one (ENOSPC, EIO) is
    cut off the same way before the error goes on, so a line is in the file whole or not at all."""
    if end is None:
        end = os.fstat(fd).st_size
    if end and not whole and os.pread(fd, 1, end - 1) != b"\n":
        start = max(0, end - TORN_TAIL_MAX)
        tail = os.pread(fd, end - start, start)
        nl = tail.rfind(b"\n")
        if nl >= 0 or start == 0:
            end = start + nl + 1
            os.ftruncate(fd, end)
        else:  # no newline in reach: not a torn record; keep it, on a line of its own
            data = b"\n" + data
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except BaseException:
        os.ftruncate(fd, end)
        raise
    return end + done


def matcher(tenant: str | None = None, session: str | None = None, tool: str | None = None
            ) -> Callable[[dict], bool] | None:
    """A record filter of `runner audit tail --tenant/--session/--tool` (each exact; --tool also
    matches the tool as a dialect named it), or None for all."""
    want = {k: v for k, v in (("tenant", tenant), ("session", session), ("tool", tool)) if v is not None}
    if not want:
        return None
    return lambda rec: all(rec.get(k) == v or (k == "tool" and rec.get("dialect_tool") == v) for k, v in want.items())


def format_record(rec: dict) -> str:
    """One line for `runner audit tail`: time, session/call, tool, status, duration, bytes, args.
    Every field is escaped: call ids, tool names and previews come from calls."""
    status = rec.get("status", "?")
    if status == "error":
        status = f"error:{rec.get('error_type') or '?'}"
    who = "/".join(str(x) for x in (rec.get("tenant"), rec.get("session"), rec.get("call_id")) if x)
    tool = f"{rec['dialect']}:{rec.get('dialect_tool')}->{rec.get('tool', '?')}" if rec.get("dialect") else rec.get("tool", "?")
    return printable(f"{rec.get('ts', '?')}  {who}  {tool}  {status}  {rec.get('duration_ms', 0)}ms  "
                     f"{rec.get('output_bytes', 0)}B  {rec.get('args', '')}")
