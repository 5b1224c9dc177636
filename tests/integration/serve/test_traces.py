"""OpenTelemetry traces of `runner serve` (issue 50): a span per request and, under it, one per
tool call with the guard steps, the sandbox acquire and the agent op as children. The server is
built as `runner serve` builds it and served by uvicorn on a loopback port in this process (the
SDK's in-memory exporter must be in the process that makes the spans), called by a real client;
a second test sends the spans over OTLP/HTTP from a real `runner serve` process to a receiver on
loopback."""
from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from .conftest import add_tenant, wait_for

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")


@pytest.fixture
def in_process(tmp_path, data, policy_file, monkeypatch, docker_client):
    import uvicorn
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runner.servers.observe import trace
    from runner.servers.serve.main import ServeOptions, build

    monkeypatch.setenv("RUNNER_AUDIT_LOG", str(tmp_path / "audit.jsonl"))  # build sets it: put back after
    key = add_tenant("obs-t", data, policy_file)
    app, state = build(ServeOptions(data=str(data), port=0))
    obs = state.extra["observer"]
    exporter = InMemorySpanExporter()
    trace(obs, SimpleSpanProcessor(exporter))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: server.started, 60, "uvicorn started")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", key, exporter
    finally:
        server.should_exit = True
        t.join(60)
        state.sessions.close_all_live()
        state.extra["networks"].close()
        obs.close()
        state.db.close()


def test_a_call_is_a_span_under_its_request_with_guards_acquire_and_op_as_children(in_process):
    url, key, exporter = in_process
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo traced"}})
        assert r.status_code == 200 and r.json()["content"] == "traced\n"
        refused = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "write", "args": {"path": "/etc/x"}})
        assert refused.json()["is_error"] is True
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    calls = [s for s in spans if s.name == "tool.call"]
    assert len(calls) == 2
    ok = next(s for s in calls if s.attributes["tool"] == "bash")
    request = by_id[ok.parent.span_id]
    assert request.name == "HTTP POST /v1/sessions/{sid}/calls" and request.parent is None
    assert request.attributes["http.response.status_code"] == 200 and request.attributes["runner.tenant"] == "obs-t"
    assert ok.attributes["tenant"] == "obs-t" and ok.attributes["session"] == sid
    assert ok.context.trace_id == request.context.trace_id
    children = [s.name for s in spans if s.parent is not None and s.parent.span_id == ok.context.span_id]
    guards = [n for n in children if n.startswith("guard.")]
    assert len(guards) >= 5, children  # every step of runner/controller/guards.py, in order
    assert "sandbox.acquire" in children and "agent.op" in children
    assert children.index("sandbox.acquire") > children.index(guards[-1])
    op = next(s for s in spans if s.name == "agent.op" and s.parent.span_id == ok.context.span_id)
    assert op.attributes["op"] == "bash"
    # the refused call: a guard's span says so, and no sandbox was asked for
    bad = next(s for s in calls if s.attributes["tool"] == "write")
    under = [s for s in spans if s.parent is not None and s.parent.span_id == bad.context.span_id]
    assert not [s for s in under if s.name in ("sandbox.acquire", "agent.op")]
    assert any(not s.status.is_ok for s in under if s.name.startswith("guard.")), [(s.name, s.status) for s in under]
    assert any(s.name == "HTTP POST /v1/sessions" for s in spans)


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length") or 0)
        type(self).bodies.append((self.path, self.rfile.read(n)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_spans_are_exported_over_otlp_when_an_endpoint_is_set(start_server, data, policy_file):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _Collector.bodies = []
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        key = add_tenant("obs-t", data, policy_file)
        server = start_server("--data", str(data), env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
            "OTEL_SERVICE_NAME": "runner-test", "OTEL_BSP_SCHEDULE_DELAY": "100"})
        with server.client(key) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code == 200
        assert server.stop() == 0  # the provider is shut down: what is left is sent

        def names():
            out = set()
            for path, body in _Collector.bodies:
                assert path == "/v1/traces"
                req = ExportTraceServiceRequest.FromString(body)
                for rs in req.resource_spans:
                    attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                    assert attrs["service.name"] == "runner-test"
                    out |= {s.name for ss in rs.scope_spans for s in ss.spans}
            return out
        wait_for(lambda: {"tool.call", "agent.op", "HTTP POST /v1/sessions/{sid}/calls"} <= names(), 30,
                 "the spans at the receiver")
    finally:
        receiver.shutdown()
        receiver.server_close()
