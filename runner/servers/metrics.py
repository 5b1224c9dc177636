"""Prometheus metrics of a server (`runner serve`, `runner mcp --http`), in the text format of the
official prometheus-client, served at GET /metrics to the operator (runner/servers/operator.py:
loopback without a key, else the operator token). prometheus-client is imported here only, so
only by a server.

The metrics (every name is queried by examples/grafana-dashboard.json; the test
tests/integration/serve/test_observe.py checks each exists):

    runner_tool_calls_total{tenant,tool}                      tool calls answered
    runner_tool_errors_total{tenant,tool,error_type}          of which errors (gated|validation|execution|timeout)
    runner_tool_call_duration_seconds{tenant,tool}            histogram of a call's time in the Runner
    runner_queue_wait_seconds{tenant}                         histogram: a call's wait for its session's turn
                                                              and a worker thread (runner serve /v1)
    runner_sandboxes_started_total{tenant}                    sandboxes made
    runner_warm_pool_hits_total{tenant}, ..._misses_total     a sandbox taken from a warm pool, or made then
    runner_egress_refusals_total{tenant}                      connections the egress proxy refused
    runner_http_responses_total{route,method,status}          responses by route template and status code
    runner_http_request_duration_seconds{route,method}        histogram of the time to the response's start
    runner_sessions{tenant,state}                             sessions by state (runner serve: the database's
                                                              rows, all instances; runner mcp: live)
    runner_sessions_live{tenant}                              sessions with a Runner in this process

A tool's name comes from the caller: a tenant's distinct tool labels are capped (TOOL_LABELS,
then "_other"), so a client cannot grow the server's memory with made-up names.
"""
from __future__ import annotations

import contextvars
import re
import threading
import time
from typing import Any, Callable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOOL_LABELS = 64  # distinct tool labels per tenant; past it, "_other"
_TOOL_OK = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

# When a /v1 call began to wait for its turn (set by the route; the worker thread inherits it).
QUEUED: contextvars.ContextVar[float | None] = contextvars.ContextVar("runner_queued", default=None)


class Metrics:
    """The metrics of one server, in a registry of its own. sessions(): [(tenant, state, n)] at
    each scrape; live(): {tenant: n}."""

    def __init__(self, sessions: Callable[[], list[tuple[str, str, int]]] | None = None,
                 live: Callable[[], dict[str, int]] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = r = CollectorRegistry(auto_describe=True)
        self.calls = Counter("runner_tool_calls", "Tool calls answered", ["tenant", "tool"], registry=r)
        self.errors = Counter("runner_tool_errors", "Tool calls answered with an error, by error_type",
                              ["tenant", "tool", "error_type"], registry=r)
        self.latency = Histogram("runner_tool_call_duration_seconds", "A tool call's time in the Runner",
                                 ["tenant", "tool"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("runner_queue_wait_seconds", "A call's wait for its session's turn and a worker thread",
                               ["tenant"], buckets=LATENCY_BUCKETS, registry=r)
        self.sandboxes = Counter("runner_sandboxes_started", "Sandboxes made", ["tenant"], registry=r)
        self.warm_hits = Counter("runner_warm_pool_hits", "Sandboxes taken from a warm pool", ["tenant"], registry=r)
        self.warm_misses = Counter("runner_warm_pool_misses", "Sandboxes made at a call because the warm pool "
                                   "had none ready", ["tenant"], registry=r)
        self.egress = Counter("runner_egress_refusals", "Connections the egress proxy refused", ["tenant"], registry=r)
        self.http = Counter("runner_http_responses", "HTTP responses by route and status",
                            ["route", "method", "status"], registry=r)
        self.http_latency = Histogram("runner_http_request_duration_seconds", "Time to a response's start",
                                      ["route", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self._tools: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        r.register(_Sessions(sessions, live))
        from ..reporting import observe

        self._stop = observe.listen(self.on_event)

    def close(self) -> None:
        self._stop()

    # -- events of the controller (runner/reporting/observe.py) -------------------------------
    def on_event(self, kind: str, f: dict) -> None:
        tenant = f.get("tenant") or ""
        if kind == "call_done":
            tool = self.tool_label(tenant, f.get("tool"))
            self.calls.labels(tenant, tool).inc()
            self.latency.labels(tenant, tool).observe(f.get("seconds") or 0.0)
            if f.get("error_type"):
                self.errors.labels(tenant, tool, str(f["error_type"])).inc()
        elif kind == "call_started":
            queued = QUEUED.get()
            if queued is not None:
                QUEUED.set(None)
                self.queue.labels(tenant).observe(max(time.monotonic() - queued, 0.0))
        elif kind == "sandbox_started":
            self.sandboxes.labels(tenant).inc()
        elif kind == "warm_pool":
            (self.warm_hits if f.get("hit") else self.warm_misses).labels(tenant).inc()
        elif kind == "egress_refused":
            self.egress.labels(tenant).inc()

    def tool_label(self, tenant: str, tool: Any) -> str:
        name = tool if isinstance(tool, str) and _TOOL_OK.match(tool) else "_other"
        with self._lock:
            seen = self._tools.setdefault(tenant, set())
            if name in seen:
                return name
            if len(seen) >= TOOL_LABELS:
                return "_other"
            seen.add(name)
            return name

    def response(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http.labels(route, method, str(status)).inc()
        self.http_latency.labels(route, method).observe(seconds)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _Sessions:
    """runner_sessions and runner_sessions_live, read at each scrape."""

    def __init__(self, sessions, live) -> None:
        self.sessions, self.live = sessions, live

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        g = GaugeMetricFamily("runner_sessions", "Sessions by state", labels=["tenant", "state"])
        for tenant, state, n in (self.sessions() if self.sessions else []):
            g.add_metric([tenant or "", state], n)
        yield g
        g = GaugeMetricFamily("runner_sessions_live", "Sessions with a Runner in this process", labels=["tenant"])
        for tenant, n in (self.live() if self.live else {}).items():
            g.add_metric([tenant or ""], n)
        yield g


def route_of(scope) -> str:
    """The route template of a request (/v1/sessions/{sid}/calls), never its raw path: a bounded label."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    raw = scope.get("path") or ""
    return raw if raw in ("/mcp", "/mcp/", "/metrics") else "other"
