"""The server's last tool calls, in memory, for the operator page (/ui): who called what, when,
how long it took, and how it ended. Bounded: the newest MAX_CALLS calls and MAX_ERRORS errors."""
from __future__ import annotations

import collections
import threading
import time

MAX_CALLS = 100
MAX_ERRORS = 50


class Recent:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: collections.deque = collections.deque(maxlen=MAX_CALLS)
        self.errors: collections.deque = collections.deque(maxlen=MAX_ERRORS)

    def note(self, tenant: str, sid: str, call_id: str, tool: str, started: float, result=None,
             failure: BaseException | None = None) -> None:
        """One call that ended: its ToolResult, or the failure that stood in for one."""
        error = None
        if failure is not None:
            error = getattr(failure, "detail", None) or str(failure) or type(failure).__name__
        elif result is None:
            error = "no result"
        elif result.is_error:
            error = f"{result.meta.get('error_type') or 'error'}: {result.text[:300]}"
        row = {"time": time.time(), "tenant": tenant, "session": sid, "call_id": call_id, "tool": tool[:200],
               "duration_ms": round((time.monotonic() - started) * 1000, 1), "ok": error is None,
               "error": str(error)[:400] if error is not None else None}
        with self._lock:
            self.calls.append(row)
            if error is not None:
                self.errors.append(row)

    def snapshot(self) -> dict:
        with self._lock:
            return {"calls": list(reversed(self.calls)), "errors": list(reversed(self.errors))}
