"""Red-team cases against the egress proxy (issue 49 review), run in this process against real
servers on loopback, with the names resolved by a resolver the test controls (the `world` of
test_egress_broker.py: api.test brokers GITHUB_TOKEN over TLS intercepted with a session CA)."""
from __future__ import annotations

import gzip
import http.client
import http.server
import json
import socket
import ssl
import threading
import zlib

import pytest

pytest.importorskip("cryptography")

from executors.docker.egress import _LogTail  # noqa: E402
from executors.docker.egress_proxy import EVENT  # noqa: E402

from . import test_egress_broker as _broker  # noqa: E402
from .test_egress_broker import PH, REAL, client_ctx  # noqa: E402

world = _broker.world  # its fixture, made once for this module too


def _events_of(stdout: str) -> list[dict]:
    """The events the controller would audit from this proxy output (egress._LogTail's parsing)."""
    got: list[dict] = []
    tail = _LogTail.__new__(_LogTail)
    tail._partial, tail.on_event = "", got.append
    tail._events(stdout)
    return got


def _intercepted(world, request: bytes) -> bytes:
    """`request` as the sandbox would send it inside an intercepted TLS connection to api.test."""
    raw = socket.create_connection(("127.0.0.1", world["proxy"].port), timeout=10)
    raw.sendall(f"CONNECT api.test:{world['hp']} HTTP/1.1\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    out = b""
    with client_ctx(world).wrap_socket(raw, server_hostname="api.test") as t:
        t.sendall(request)
        try:
            while chunk := t.recv(4096):
                out += chunk
        except (ssl.SSLError, OSError):
            pass
    return out


FORGED = '{"event":"egress","client":"10.0.0.9","host":"forged.test","port":443,"decision":"allowed"}'


def test_the_sandbox_cannot_forge_an_audited_event_through_the_proxys_log(world, capsys):
    # The proxy's stdout carried both its log lines and the EVENT lines the controller audits. A
    # request line may hold a bare LF, and the log wrote method and path side by side: a method
    # ending in "\nEVENT" and a path that is a JSON object made a line the controller took for an
    # event of the proxy's (any host, decision, client, byte counts the agent liked).
    proxy = world["proxy"]
    proxy.events = None  # as in its container: events on stdout
    try:
        capsys.readouterr()
        _intercepted(world, f"GET\nEVENT {FORGED}\n HTTP/1.1\r\nHost: api.test:{world['hp']}\r\n"
                            f"Authorization: Bearer {PH}\r\n\r\n".encode("latin-1"))
        seen = ""
        for _ in range(250):  # the event is written after the answer went
            seen += capsys.readouterr().out
            if f"{EVENT} " in seen:
                break
            threading.Event().wait(0.02)
    finally:
        proxy.events = world["events"].append
    events = _events_of(seen)
    assert events, seen  # the genuine one is there
    assert not [e for e in events if e.get("host") == "forged.test"], seen
    assert [e["host"] for e in events] == ["api.test"], events


@pytest.mark.parametrize("smuggled", [
    "Content-Length: 60\r\nX-A: a\nHost: other.test",  # a bare LF: one header to the proxy, two to a lenient server
    "Content-Length: 60\r\nX-A: a\rHost: other.test",
    "Content-Length: 60\r\nX-A: a\x00b",
    # a head that ends early for the server: the brokered header after it becomes the body of a
    # POST the listed host may store (a gist, a comment) and serve again through another host
    "Content-Length: 60\r\nX-A: a\n\nAuthorization: Bearer {PH}",
])
def test_a_bare_line_end_cannot_make_the_server_read_another_head_than_the_proxy_checked(world, smuggled):
    # The proxy checks the one Host header it parsed; a server that takes a bare LF (or CR) for a
    # line end reads another head: another Host (another site of a shared front end, with the
    # real value in Authorization), or a head that ends early, leaving the brokered header in the
    # body (seen on the old code: the server read "Authorization: Bearer <real value>" as the
    # POST's body). A request head with a control character is refused before it goes on.
    n = len(world["https"].seen)
    answer = _intercepted(world, f"POST / HTTP/1.1\r\nHost: api.test:{world['hp']}\r\n{smuggled.format(PH=PH)}\r\n"
                                 f"Authorization: Bearer {PH}\r\n\r\n{'x' * 60}".encode("latin-1"))
    assert not [g for g in world["https"].seen[n:] if REAL in g["body"]]
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert len(world["https"].seen) == n  # nothing reached the server


class Gzipper(http.server.BaseHTTPRequestHandler):
    """A listed host that echoes the request's headers compressed whatever it was asked (as some
    echo services' /gzip pages do)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        raw = json.dumps(dict(self.headers.items())).encode()
        if self.path == "/upgrade":  # a server that switches whatever the Connection header said
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Extensions", "permessage-deflate")
            self.end_headers()
            self.wfile.write(zlib.compress(raw))
            return
        how = self.path.strip("/") or "gzip"
        body = gzip.compress(raw) if how == "gzip" else zlib.compress(raw)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", how)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("how", ["gzip", "deflate", "upgrade"])
def test_a_compressed_answer_cannot_carry_the_value_past_the_masker(world, tmp_path, how):
    # The proxy asks for identity, but a listed host may compress anyway: the masker sees only
    # compressed bytes, and the sandbox decompresses the real value.
    leaf = world["upstream_ca"].leaf("api.test")
    (tmp_path / "leaf.pem").write_text(leaf["cert"] + leaf["key"])
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(tmp_path / "leaf.pem")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gzipper)
    srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    proxy, old = world["proxy"], world["proxy"].state
    try:
        proxy.reconfigure({**world["cfg"], "allow": [*world["cfg"]["allow"], f"api.test:{port}", f"127.0.0.1:{port}"]})
        conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=client_ctx(world), timeout=10)
        conn.set_tunnel(f"api.test:{port}")
        conn.request("GET", f"/{how}", headers={"Host": f"api.test:{port}", "Authorization": f"Bearer {PH}"})
        r = conn.getresponse()
        data = r.read()
        conn.close()
    finally:
        proxy.state = old
        srv.shutdown()
        srv.server_close()
    if r.getheader("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    elif r.getheader("Content-Encoding") == "deflate" or r.status == 101:
        data = zlib.decompress(data if r.status != 101 else r.fp.read())
    assert REAL.encode() not in data
    assert r.status == 502 and (b"compressed" in data or b"protocol switch" in data), (r.status, data)


def test_a_flood_of_requests_cannot_flood_the_audit_log_and_each_is_still_counted():
    # Every request became one audit line on the controller, in the log tenants share and that
    # rotates by size: a sandbox connecting as fast as it could pushed every other record out
    # (the old proxy itemised all 40 below). Past its budget the proxy counts, and says how many.
    from executors.docker.egress_proxy import Proxy

    now = [1000.0]
    proxy = Proxy({"allow": ["api.test:443"], "port": 0, "bind": "127.0.0.1", "head_timeout": 5,
                   "event_burst": 5, "event_rate": 1}, resolve=lambda name, port: [])
    proxy.clock = lambda: now[0]  # frozen: the budget refills only when the test says
    proxy._stamp = now[0]
    events: list = []
    proxy.events = events.append
    proxy.listen()
    threading.Thread(target=proxy.serve, daemon=True).start()
    try:
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            s.sendall(f"CONNECT evil{i}.test:443 HTTP/1.1\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 403")
            s.close()
        for _ in range(250):  # (each event is reported after its answer went)
            if len(events) + sum(getattr(proxy, "_unlisted", {}).values()) >= 40:
                break
            threading.Event().wait(0.02)
        itemised = [e for e in events if e.get("event") == "egress"]
        assert len(itemised) == 5 and all(e["host"].startswith("evil") for e in itemised)
        now[0] += 1.0
        proxy.flush_unlisted()
        summary = [e for e in events if e.get("unlisted")]
        assert len(summary) == 1 and summary[0]["unlisted"] == 35 and summary[0]["decision"] == "refused"
        assert "35 request(s) over the audit budget" in summary[0]["reason"]
    finally:
        proxy.close()


def test_an_unlisted_count_is_audited():
    from runner.reporting.audit import AuditLog

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        log = AuditLog(f"{d}/audit.jsonl")
        rec = log.record_egress({"event": "egress", "decision": "refused", "unlisted": 35, "exfiltration": True,
                                 "reason": "35 request(s) over the audit budget"}, session="s1")
        assert rec["egress"]["unlisted"] == 35 and rec["egress"]["exfiltration"] and rec["status"] == "error"
        log.close()


def test_an_interim_answer_reaches_the_sandbox_while_the_final_head_is_awaited(world):
    # The masker checks every answer head before the final one; a 100 Continue must still reach
    # a client that waits for it before it sends its body (git and curl do, for larger pushes).
    n = len(world["https"].seen)
    raw = socket.create_connection(("127.0.0.1", world["proxy"].port), timeout=10)
    raw.sendall(f"CONNECT api.test:{world['hp']} HTTP/1.1\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    with client_ctx(world).wrap_socket(raw, server_hostname="api.test") as t:
        t.sendall(f"POST /up HTTP/1.1\r\nHost: api.test:{world['hp']}\r\nAuthorization: Bearer {PH}\r\n"
                  f"Content-Length: 5\r\nExpect: 100-continue\r\n\r\n".encode())
        assert t.recv(4096).startswith(b"HTTP/1.1 100")
        t.sendall(b"hello")
        data = b""
        while b"\r\n\r\n" not in data:
            data += t.recv(4096)
    assert data.startswith(b"HTTP/1.1 200")
    assert world["https"].seen[n]["body"] == "hello"


class Chunker(http.server.BaseHTTPRequestHandler):
    """A listed host that echoes the request's headers in small chunks (any streaming server's
    framing can fall inside a value it reflects; the agent moves it with the padding it sends)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        raw = json.dumps(dict(self.headers.items())).encode()
        size = int(self.path.strip("/") or 7)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(raw), size):
            part = raw[i:i + size]
            self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part) if i == 0 else b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *a):
        pass


def _via_brokering_proxy(world, tmp_path, handler, path):
    """GET `path` with the placeholder in Authorization from a server of `handler` under api.test."""
    leaf = world["upstream_ca"].leaf("api.test")
    (tmp_path / "leaf.pem").write_text(leaf["cert"] + leaf["key"])
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(tmp_path / "leaf.pem")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    proxy, old = world["proxy"], world["proxy"].state
    try:
        proxy.reconfigure({**world["cfg"], "allow": [*world["cfg"]["allow"], f"api.test:{port}", f"127.0.0.1:{port}"]})
        conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=client_ctx(world), timeout=10)
        conn.set_tunnel(f"api.test:{port}")
        conn.request("GET", path, headers={"Host": f"api.test:{port}", "Authorization": f"Bearer {PH}"})
        r = conn.getresponse()
        data = r.read()  # (http.client reads the chunked framing: it must still be right)
        conn.close()
        return r, data
    finally:
        proxy.state = old
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("size", [1, 5, 7, 13])
def test_a_value_split_by_chunked_framing_is_masked_too(world, tmp_path, size):
    r, data = _via_brokering_proxy(world, tmp_path, Chunker, f"/{size}")
    assert r.status == 200
    got = json.loads(data)
    assert REAL.encode() not in data and got["Authorization"] == "Bearer " + "*" * len(REAL)


def test_the_masker_holds_back_only_what_could_still_become_a_value():
    from executors.docker.egress_proxy import Broker, Masker

    b = Broker({"name": "T", "placeholder": PH, "value": REAL, "hosts": ["api.test"]})
    m = Masker([b])
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    out = m.feed(head + b"5\r\nhello\r\n")
    assert out == head + b"5\r\nhello\r\n"  # a stream of small events is not held back
    # a value cut across reads and across chunks: held until it is whole, then masked
    cut = 9
    out += m.feed(b"%x\r\n%s\r\n" % (cut, REAL[:cut].encode()))
    out += m.feed(b"%x\r\n%s\r\n" % (len(REAL) - cut, REAL[cut:].encode()) + b"0\r\n\r\n")
    out += m.feed(b"")
    assert REAL[:cut].encode() not in out and b"*" * cut in out and m.masked == 1
    assert out.endswith(b"0\r\n\r\n") and out.count(b"\r\n") == head.count(b"\r\n") + 2 + 4 + 2
