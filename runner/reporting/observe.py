"""What the controller tells an observer (a server's metrics and traces), and nothing when none
listens: the hooks cost a list check (emit) or a shared do-nothing context (span).

    from runner.reporting import observe
    observe.emit("sandbox_started", tenant="acme")     # counted by runner/servers/serve/metrics.py
    with observe.span("sandbox.acquire", tool="bash"):  # a child span when a tracer is installed
        ...

Events (kind: fields): sandbox_started (tenant), warm_pool (tenant, hit), egress_refused
(tenant, host), call_done (tenant, tool, error_type or None, seconds). A listener is called on
the thread that emitted, and must not raise (what it raises is dropped). The tracer is an
OpenTelemetry tracer that runner/servers/observe.py installs when the SDK is configured.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

_listeners: list[Callable[[str, dict], None]] = []
_tracer: Any = None
_say: Callable[[str, str], None] | None = None  # a server's log (runner/servers/logs.py), when one runs
_NOTHING = contextlib.nullcontext()


def listen(fn: Callable[[str, dict], None]) -> Callable[[], None]:
    """Call fn(kind, fields) on every event from now on; answers what stops it."""
    _listeners.append(fn)
    return lambda: _listeners.remove(fn) if fn in _listeners else None


def emit(kind: str, **fields: Any) -> None:
    for fn in list(_listeners):
        try:
            fn(kind, fields)
        except Exception:
            pass


def set_tracer(tracer: Any) -> None:
    """Spans go to this OpenTelemetry tracer (None: spans are nothing again)."""
    global _tracer
    _tracer = tracer


def span(name: str, **attributes: Any):
    """A span, child of the current one, while the block runs; nothing without a tracer."""
    if _tracer is None:
        return _NOTHING
    return _tracer.start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None})


def tracing() -> bool:
    return _tracer is not None


def set_say(fn: Callable[[str, str], None] | None) -> None:
    """say() goes to fn(text, level) from now on (None: to stderr again)."""
    global _say
    _say = fn


def say(text: str, who: str = "runner serve", level: str = "warning") -> None:
    """A line for the operator: to the server's log when one runs (one JSON line there), else
    `who: text` on stderr (a command such as `runner tenants remove` doing the server's work)."""
    if _say is not None:
        try:
            return _say(text, level)
        except Exception:
            pass
    sys.stderr.write(f"{who}: {text}\n")
