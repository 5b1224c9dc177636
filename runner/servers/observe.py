"""What a server (`runner serve`, `runner mcp --http`) shows its operator: the access log and the
metrics of every request (the outermost layer, `Access`), GET /metrics behind the operator's
token (runner/servers/operator.py), and OpenTelemetry traces when the SDK is installed and an
OTLP endpoint is configured.

Traces (the extra runner[otel]): a span per request (`HTTP POST /v1/sessions/{sid}/calls`), and
under it a span per tool call (`tool.call`) with the guard steps (`guard.<step>`), the sandbox
acquire (`sandbox.acquire`) and the agent op (`agent.op`) as children (runner/reporting/observe.py).
They are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the SDK's own variables: headers, timeout, ...);
OTEL_SERVICE_NAME names the service (default runner-serve).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from .logs import Log
from .metrics import CONTENT_TYPE, Metrics, route_of
from .operator import OperatorAuth

OTLP_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@dataclass
class Observer:
    log: Log
    metrics: Metrics | None = None  # None: prometheus-client is not installed (/metrics answers 501)
    operator: OperatorAuth = field(default_factory=lambda: OperatorAuth(None))
    tracer: Any = None
    provider: Any = None  # the SDK's TracerProvider, flushed and shut down by close()
    stops: list = field(default_factory=list)  # what close() undoes besides (listeners of the server's)

    def close(self) -> None:
        from ..reporting import observe

        for stop in self.stops:
            stop()
        observe.set_say(None)
        if self.metrics is not None:
            self.metrics.close()
        if self.provider is not None:
            observe.set_tracer(None)
            try:
                self.provider.shutdown()
            except Exception:
                pass


def make_observer(log: Log, operator_token: str | None, service: str = "runner-serve",
                  sessions=None, live=None, environ: dict[str, str] | None = None) -> Observer:
    """The server's Observer: metrics when prometheus-client is there, traces when OTLP is configured."""
    try:
        metrics = Metrics(sessions, live)
    except ImportError:
        metrics = None
        log.warning("warning", "prometheus-client is not installed: /metrics answers 501 (pip install 'runner[serve]')")
    obs = Observer(log=log, metrics=metrics, operator=OperatorAuth(operator_token))
    env = os.environ if environ is None else environ
    if any(env.get(v) for v in OTLP_VARS):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as e:
            log.warning("warning", f"an OTLP endpoint is set but the OpenTelemetry SDK is not installed ({e}): no "
                                   "traces (pip install 'runner[otel]')")
        else:
            trace(obs, BatchSpanProcessor(OTLPSpanExporter()), env.get("OTEL_SERVICE_NAME") or service)
            log.info("tracing", f"traces go over OTLP to {env.get(OTLP_VARS[1]) or env.get(OTLP_VARS[0])}")
    return obs


def trace(obs: Observer, processor, service: str = "runner-serve") -> None:
    """Send the server's spans through `processor` (an OTLP exporter's, or a test's in-memory one)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from ..reporting import observe

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(processor)
    obs.provider, obs.tracer = provider, provider.get_tracer("runner")
    observe.set_tracer(obs.tracer)


class Access:
    """The outermost layer: each HTTP request's span, its metrics and its access log line."""

    def __init__(self, app, obs: Observer) -> None:
        self.app, self.obs = app, obs

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.monotonic()
        seen = {"status": None, "started": None, "done": False}
        scope.setdefault("state", {})  # the tenant is put there once known (runner/servers/serve/gate.py)
        method = scope.get("method", "")

        async def watch(msg):
            if msg["type"] == "http.response.start" and seen["status"] is None:
                seen["status"], seen["started"] = msg["status"], time.monotonic()
            elif msg["type"] == "http.response.body" and not msg.get("more_body") and not seen["done"]:
                # counted before the answer's last bytes go: a client that has its answer finds
                # it in /metrics (counted after, a quick reader missed it)
                seen["done"] = True
                self._done(scope, method, seen, t0)
            await send(msg)

        span = None
        if self.obs.tracer is not None:
            from opentelemetry.trace import SpanKind

            span = self.obs.tracer.start_as_current_span(f"HTTP {method}", kind=SpanKind.SERVER,
                                                         attributes={"http.request.method": method})
        try:
            if span is None:
                return await self.app(scope, receive, watch)
            with span as s:
                try:
                    return await self.app(scope, receive, watch)
                finally:
                    route = route_of(scope)
                    s.update_name(f"HTTP {method} {route}")
                    s.set_attribute("http.route", route)
                    if seen["status"] is not None:
                        s.set_attribute("http.response.status_code", seen["status"])
                    tenant = (scope.get("state") or {}).get("tenant")
                    if tenant:
                        s.set_attribute("runner.tenant", tenant)
        finally:
            if not seen["done"]:  # (no answer, or one cut short)
                self._done(scope, method, seen, t0)

    def _done(self, scope, method: str, seen: dict, t0: float) -> None:
        now = time.monotonic()
        status = seen["status"] if seen["status"] is not None else 500  # no answer began: the app failed
        route = route_of(scope)
        if self.obs.metrics is not None:
            self.obs.metrics.response(route, method, status, (seen["started"] or now) - t0)
        tenant = (scope.get("state") or {}).get("tenant")
        level = "warning" if status >= 500 else "info"
        self.obs.log.event("request", f"{method} {route} {status}", level, method=method, route=route,
                           status=status, duration_ms=round((now - t0) * 1000, 1), tenant=tenant)


async def metrics_endpoint(obs: Observer, scope, receive, send) -> None:
    """GET /metrics as an ASGI answer: the exposition, 401 without the operator's right, 501
    without prometheus-client."""
    import json

    if not obs.operator.allowed(scope, loopback_ok=True):
        body, status, ctype = json.dumps({"detail": OperatorAuth.REFUSAL}).encode(), 401, "application/json"
        extra = [(b"www-authenticate", b"Bearer")]
    elif obs.metrics is None:
        body, status, ctype, extra = b'{"detail": "prometheus-client is not installed"}', 501, "application/json", []
    else:
        body, status, ctype, extra = obs.metrics.exposition(), 200, CONTENT_TYPE, []
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *extra]})
    await send({"type": "http.response.body", "body": body})
