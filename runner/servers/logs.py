"""A server's log on stderr: one JSON object a line (the default), or plain lines for a person
(`--log-format text`), at or above a level (`--log-level`, default info).

    {"ts": "2026-11-29T07:40:01.123Z", "level": "info", "event": "request", "method": "POST",
     "route": "/v1/sessions/{sid}/calls", "status": 200, "duration_ms": 812.4, "tenant": "acme",
     "msg": "POST /v1/sessions/{sid}/calls 200"}

Events: request (one per request: tenant, route, status, duration_ms), listening, stopping,
stopped, session_created, session_closed (reason: deleted, idle timeout, ...), reaper (what the
reaper removed), warning, error. `msg` is always last and says the same in words; the text format
prints `runner serve: msg`.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
FORMATS = ("json", "text")


class Log:
    def __init__(self, name: str = "runner serve", fmt: str = "json", level: str = "info", stream=None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        if level not in LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
        self.name, self.fmt, self.threshold = name, fmt, LEVELS[level]
        self.stream = stream
        self._lock = threading.RLock()  # a signal handler (SIGTERM: `stopping`) may log while its thread does

    def enabled(self, level: str) -> bool:
        return LEVELS[level] >= self.threshold

    def event(self, event: str, msg: str, level: str = "info", always: bool = False, **fields: Any) -> None:
        """One line, unless below the level (always: whatever the level: the line a supervisor
        waits for, `listening`)."""
        if not always and not self.enabled(level):
            return
        if self.fmt == "text":
            line = f"{self.name}: {msg}\n"
        else:
            when = datetime.fromtimestamp(time.time(), tz=timezone.utc).isoformat(timespec="milliseconds")
            rec = {"ts": when.replace("+00:00", "Z"), "level": level, "event": event,
                   **{k: v for k, v in fields.items() if v is not None}, "msg": msg}
            line = json.dumps(rec, ensure_ascii=True, default=str) + "\n"
        stream = self.stream or sys.stderr
        with self._lock:
            try:
                stream.write(line)
                stream.flush()
            except (OSError, ValueError):  # stderr closed: the server goes on
                pass

    def info(self, event: str, msg: str, **fields: Any) -> None:
        self.event(event, msg, "info", **fields)

    def warning(self, event: str, msg: str, **fields: Any) -> None:
        self.event(event, msg, "warning", **fields)
