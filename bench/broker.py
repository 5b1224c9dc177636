"""Brokered secrets' cost, for `make bench`: one HTTPS request (a new connection, TLS, GET, the
answer) through the egress proxy to a host that brokers a secret (TLS intercepted with the
session CA's leaf, the placeholder swapped, a second TLS to the server verified against its CA,
the answer scanned) against the same request through the plain end-to-end CONNECT tunnel, and
against no proxy at all. All on loopback, the proxy in this process (its container adds the same
network hop to both proxied figures); the ratio is against the plain tunnel, in one run, turns
taken in rounds so both see the same load."""
from __future__ import annotations

import http.client
import http.server
import ipaddress
import ssl
import tempfile
import threading
from pathlib import Path

from bench.run import timed_together

PH = "runner-secret-" + "ab" * 16


class _Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # its head and body are two writes: no 40 ms wait for an ACK between

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


def broker_section(n: int, results: dict) -> list:
    from executors.docker.egress_proxy import Proxy
    from executors.docker.egress_tls import SessionCA

    upstream_ca, session_ca = SessionCA("bench-upstream"), SessionCA("bench-session")
    with tempfile.TemporaryDirectory(prefix="runner-bench-broker-") as d:
        pem = Path(d) / "leaf.pem"
        leaf = upstream_ca.leaf("api.bench.test")
        pem.write_text(leaf["cert"] + leaf["key"])
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(pem)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]

    def resolve(name, p):
        return [ipaddress.ip_address("127.0.0.1")]

    proxy = Proxy({"allow": [f"api.bench.test:{port}", f"plain.bench.test:{port}", f"127.0.0.1:{port}"],
                   "broker": [{"name": "T", "placeholder": PH, "value": "real-" + "x" * 32,
                               "hosts": ["api.bench.test"]}],
                   "tls": {"api.bench.test": session_ca.leaf("api.bench.test")},
                   "trust": {"api.bench.test": upstream_ca.cert_pem}, "port": 0, "bind": "127.0.0.1"},
                  resolve=resolve)
    proxy.events = lambda ev: None
    proxy.log = lambda *a: None
    proxy.listen()
    threading.Thread(target=proxy.serve, daemon=True).start()
    to_server = ssl.create_default_context(cadata=upstream_ca.cert_pem)
    to_server.check_hostname = False  # (reached as 127.0.0.1; the chain is still verified)
    to_proxy = ssl.create_default_context(cadata=session_ca.cert_pem)

    def get(ctx, tunnel_host=None):
        def once():
            if tunnel_host is None:
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
                c.request("GET", "/", headers={"Host": "api.bench.test"})
            else:
                c = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=ctx, timeout=30)
                c.set_tunnel(f"{tunnel_host}:{port}")
                c.request("GET", "/", headers={"Authorization": f"Bearer {PH}"})
            r = c.getresponse()
            assert r.status == 200 and r.read() == b"ok", r.status
            c.close()
        return once

    # the plain tunnel reaches the server end to end: its name in the certificate is api.bench.test
    plain_ctx = ssl.create_default_context(cadata=upstream_ca.cert_pem)
    plain_ctx.check_hostname = False  # (plain.bench.test is the same server under a name that brokers nothing)
    try:
        direct, tunnel, brokered = timed_together(
            [get(to_server), get(plain_ctx, "plain.bench.test"), get(to_proxy, "api.bench.test")], n, warmup=2)
    finally:
        proxy.close()
        srv.shutdown()
    results["broker_https"], results["tunnel_https"] = brokered, tunnel
    rows = [("HTTPS GET, plain CONNECT tunnel (end-to-end TLS)", tunnel, None),
            ("HTTPS GET, brokered (intercepted, placeholder swapped)", brokered, tunnel),
            ("HTTPS GET, no proxy (for scale)", direct, tunnel)]
    return [("brokered secrets: one HTTPS request through the egress proxy (in process, loopback)", rows,
             ["ratio: against the plain tunnel; each request is a new connection and a full TLS handshake "
              "(two for the brokered one: sandbox-proxy, proxy-server)"])]
