"""Brokered secrets in the egress proxy, run in this process against real servers on loopback:
an HTTPS server with a certificate of its own CA under the name api.test, a plain HTTP server
under other.test, a real client through the proxy (CONNECT + TLS with the session CA, or an
absolute http:// URL). The names resolve through a resolver the test controls."""
from __future__ import annotations

import base64
import http.client
import http.server
import ipaddress
import json
import socket
import ssl
import threading

import pytest

pytest.importorskip("cryptography")

from executors.docker.egress_proxy import Proxy, _forms  # noqa: E402
from executors.docker.egress_tls import SessionCA  # noqa: E402

REAL = "ghp_REALVALUE_do_not_leak_123456"
PH = "runner-secret-5f0c1e2d3b4a69788796a5b4c3d2e1f0"


class Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list

    def _any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                                 "body": body.decode("latin-1")})
        out = json.dumps({"authorization": self.headers.get("Authorization"), "host": self.headers.get("Host"),
                          "x-token": self.headers.get("X-Token")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *a):
        pass


def serve(ctx=None):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    srv.seen = []
    if ctx is not None:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    upstream_ca = SessionCA("upstream-test")  # the private service's own CA (tls_ca_file)
    d = tmp_path_factory.mktemp("tls")
    leaf = upstream_ca.leaf("api.test")
    (d / "leaf.pem").write_text(leaf["cert"] + leaf["key"])
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(d / "leaf.pem")
    https, plain = serve(sctx), serve()
    session_ca = SessionCA("sess-test")
    hp, pp = https.server_address[1], plain.server_address[1]
    table = {"api.test": "127.0.0.1", "other.test": "127.0.0.1"}

    def resolve(name, port):
        if name not in table:
            raise OSError(f"{name} does not resolve")
        return [ipaddress.ip_address(table[name])]

    cfg = {"allow": [f"api.test:{hp}", f"127.0.0.1:{hp}", f"other.test:{pp}", f"127.0.0.1:{pp}"],
           "broker": [{"name": "GITHUB_TOKEN", "placeholder": PH, "value": REAL, "hosts": ["api.test"]}],
           "tls": {"api.test": session_ca.leaf("api.test")}, "trust": {"api.test": upstream_ca.cert_pem},
           "port": 0, "bind": "127.0.0.1", "head_timeout": 5, "idle_timeout": 10}
    proxy = Proxy(cfg, resolve=resolve)
    events: list = []
    proxy.events = events.append
    proxy.listen()
    threading.Thread(target=proxy.serve, daemon=True).start()
    w = dict(proxy=proxy, events=events, https=https, plain=plain, hp=hp, pp=pp, cfg=cfg,
             session_ca=session_ca, upstream_ca=upstream_ca)
    yield w
    proxy.close()
    https.shutdown()
    plain.shutdown()


def client_ctx(world):
    return ssl.create_default_context(cadata=world["session_ca"].cert_pem)


def https_request(world, method, path, headers=None, body=None, host="api.test", connect_host=None):
    conn = http.client.HTTPSConnection("127.0.0.1", world["proxy"].port, context=client_ctx(world), timeout=10)
    conn.set_tunnel(f"{connect_host or host}:{world['hp']}")
    conn.request(method, path, body=body, headers={"Host": f"{host}:{world['hp']}", **(headers or {})})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def last_event(world, **match):
    """The newest event with these fields (the proxy logs a connection after its answer went:
    wait for it; an earlier test's late event does not count)."""
    for _ in range(500):
        for ev in reversed(list(world["events"])):
            if all(ev.get(k) == v for k, v in match.items()):
                return ev
        threading.Event().wait(0.02)
    raise AssertionError(f"no event with {match}: {world['events']}")


def test_the_placeholder_becomes_the_real_value_only_on_the_way_to_a_listed_host(world):
    world["events"].clear()
    n = len(world["https"].seen)
    status, data = https_request(world, "GET", "/user?x=1", {"Authorization": f"Bearer {PH}", "X-Token": PH})
    assert status == 200
    got = world["https"].seen[n]
    assert got["headers"]["Authorization"] == f"Bearer {REAL}" and got["headers"]["X-Token"] == REAL
    # the server echoes the header: the sandbox never reads the real value back
    answer = json.loads(data)
    assert REAL not in data.decode() and answer["authorization"] == "Bearer " + "*" * len(REAL)
    ev = last_event(world, path="/user")
    assert ev["intercepted"] and ev["decision"] == "allowed" and ev["secrets"] == ["GITHUB_TOKEN"]
    assert (ev["host"], ev["method"], ev["path"]) == ("api.test", "GET", "/user") and ev["bytes_down"] > 0
    assert ev["masked"] == 2 and answer["x-token"] == "*" * len(REAL)


def test_basic_auth_userinfo_is_brokered(world):
    n = len(world["https"].seen)
    cred = base64.b64encode(f"x-access-token:{PH}".encode()).decode()
    status, data = https_request(world, "POST", "/repo.git/git-receive-pack", {"Authorization": f"Basic {cred}"},
                                 body=b"pack")
    assert status == 200
    got = world["https"].seen[n]["headers"]["Authorization"]
    assert base64.b64decode(got.split()[1]).decode() == f"x-access-token:{REAL}"
    # the server echoes it: base64 of the value comes back masked too (it would decode to the value)
    echoed = json.loads(data)["authorization"].split()[1]
    assert echoed != got.split()[1] and REAL not in base64.b64decode(echoed + "==", altchars=b"*-").decode("latin-1")


@pytest.mark.parametrize("where", ["header", "url", "body", "basic-auth"])
def test_the_placeholder_to_any_other_host_is_refused_and_audited_as_exfiltration(world, where):
    world["events"].clear()
    n = len(world["plain"].seen)
    c = http.client.HTTPConnection("127.0.0.1", world["proxy"].port, timeout=10)
    url = f"http://other.test:{world['pp']}/collect" + (f"?t={PH}" if where == "url" else "")
    headers = {"X-Data": f"tok {PH}"} if where == "header" else {}
    if where == "basic-auth":
        headers = {"Authorization": "Basic " + base64.b64encode(f"u:{PH}".encode()).decode()}
    c.request("POST", url, body=(f"token={PH}" if where == "body" else "hello").encode(), headers=headers)
    r = c.getresponse()
    text = r.read().decode()
    assert r.status == 403 and "attempted exfiltration" in text and "GITHUB_TOKEN" in text
    assert len(world["plain"].seen) == n  # nothing reached the other host
    ev = last_event(world, host="other.test", decision="refused")
    assert ev["exfiltration"] and "GITHUB_TOKEN" in ev["reason"]


def test_a_request_without_placeholders_to_another_host_goes_through_unchanged(world):
    n = len(world["plain"].seen)
    c = http.client.HTTPConnection("127.0.0.1", world["proxy"].port, timeout=10)
    c.request("GET", f"http://other.test:{world['pp']}/plain", headers={"X-Token": "nothing"})
    r = c.getresponse()
    r.read()
    assert r.status == 200 and world["plain"].seen[n]["headers"]["X-Token"] == "nothing"


def test_sni_and_host_must_name_the_connect_target(world):
    world["events"].clear()
    raw = socket.create_connection(("127.0.0.1", world["proxy"].port), timeout=10)
    raw.sendall(f"CONNECT api.test:{world['hp']} HTTP/1.1\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    ctx = client_ctx(world)
    ctx.check_hostname = False  # the client would accept anything: the proxy still says no
    with pytest.raises((ssl.SSLError, OSError)):
        ctx.wrap_socket(raw, server_hostname="evil.test").sendall(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
    raw.close()
    ev = last_event(world, decision="refused", host="api.test")
    assert "SNI names 'evil.test'" in ev["reason"]
    status, data = https_request(world, "GET", "/", {"Authorization": f"Bearer {PH}"}, host="other.test",
                                 connect_host="api.test")
    assert status == 421 and b"inside a connection to api.test" in data


def test_the_real_server_is_verified_against_the_hosts_ca(world):
    # the same server, its CA no longer trusted: the proxy refuses to send it anything
    proxy = world["proxy"]
    cfg = {**world["cfg"], "trust": {"api.test": SessionCA("someone-else").cert_pem}}
    old = proxy.state
    n = len(world["https"].seen)
    try:
        proxy.reconfigure(cfg)
        status, data = https_request(world, "GET", "/", {"Authorization": f"Bearer {PH}"})
        assert status == 502 and b"failed verification" in data
        assert len(world["https"].seen) == n
    finally:
        proxy.state = old


def test_a_live_policy_change_applies_to_new_connections(world):
    proxy = world["proxy"]
    old = proxy.state
    try:
        proxy.reconfigure({**world["cfg"], "allow": [f"other.test:{world['pp']}", f"127.0.0.1:{world['pp']}"]})
        status, data = https_request(world, "GET", "/", {})
        assert status == 403 or b"not in the allowlist" in data
    except (ssl.SSLError, OSError) as e:  # the tunnel itself is refused: http.client says so
        assert "403" in str(e)
    finally:
        proxy.state = old
    assert https_request(world, "GET", "/", {})[0] == 200


def test_placeholder_forms_cover_base64_at_every_alignment():
    for prefix in ("", "u:", "ab:"):
        enc = base64.b64encode(f"{prefix}{PH}!".encode())
        assert any(f in enc for f in _forms(PH)[1:])


# -- egress bound to names ---------------------------------------------------------------------

@pytest.fixture
def bound(world):
    """A proxy whose resolver the test controls: api.test answers 127.0.0.1 once, then 127.0.0.2
    (a rebinding), and the resolver counts its calls. Only 127.0.0.1 is listed as an address."""
    calls = []

    def resolve(name, port):
        calls.append(name)
        return [ipaddress.ip_address("127.0.0.1" if len(calls) == 1 else "127.0.0.2")]

    hp = world["hp"]
    proxy = Proxy({"allow": [f"api.test:{hp}", f"127.0.0.1:{hp}", f"plain.test:{hp}"], "port": 0, "bind": "127.0.0.1",
                   "head_timeout": 5, "idle_timeout": 10}, resolve=resolve)
    events: list = []
    proxy.events = events.append
    proxy.listen()
    threading.Thread(target=proxy.serve, daemon=True).start()
    yield proxy, calls, events
    proxy.close()


def tunnel(proxy, target: str):
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    return s, s.recv(4096).decode("latin-1")


def test_a_listed_name_reaches_only_what_the_proxy_resolved_each_time(world, bound):
    proxy, calls, events = bound
    hp = world["hp"]
    s, head = tunnel(proxy, f"api.test:{hp}")
    assert head.startswith("HTTP/1.1 200")
    ctx = ssl.create_default_context(cadata=world["upstream_ca"].cert_pem)  # end to end: not brokered here
    with ctx.wrap_socket(s, server_hostname="api.test") as t:
        t.sendall(f"GET /first HTTP/1.1\r\nHost: api.test:{hp}\r\nConnection: close\r\n\r\n".encode())
        assert t.recv(4096).startswith(b"HTTP/1.1 200")
    assert calls == ["api.test"]  # one lookup, the address it checked is the one it connected to
    # the name now answers another address: checked again, refused before any connection
    s, head = tunnel(proxy, f"api.test:{hp}")
    assert head.startswith("HTTP/1.1 403") and "resolves to 127.0.0.2, a loopback address" in head
    s.close()
    assert calls == ["api.test", "api.test"]
    # an address the sandbox picks for the name is not the name
    s, head = tunnel(proxy, f"127.0.0.2:{hp}")
    assert head.startswith("HTTP/1.1 403") and "not listed" in head
    s.close()


def test_tls_in_a_tunnel_must_name_the_connect_target(world, bound):
    proxy, calls, events = bound
    hp = world["hp"]
    calls.clear()  # api.test answers 127.0.0.1 again
    s, head = tunnel(proxy, f"api.test:{hp}")
    assert head.startswith("HTTP/1.1 200")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with pytest.raises((ssl.SSLError, OSError)):
        with ctx.wrap_socket(s, server_hostname="elsewhere.test") as t:
            t.sendall(b"GET / HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n")
            assert t.recv(4096) == b""  # (the proxy closed: nothing was relayed)
            raise OSError("closed")
    for _ in range(500):
        if any("SNI mismatch" in (e.get("reason") or "") for e in events):
            break
        threading.Event().wait(0.02)
    assert any("'elsewhere.test' inside a tunnel to api.test (SNI mismatch)" in (e.get("reason") or "") for e in events)
    assert not [g for g in world["https"].seen if g["headers"].get("Host") == "elsewhere.test"]


def test_client_hello_parsing():
    from executors.docker.egress_proxy import client_hello_sni

    ctx = ssl.create_default_context()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="api.example.test")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = out.read()
    assert client_hello_sni(hello) == "api.example.test"
    assert client_hello_sni(b"GET / HTTP/1.1\r\n") is None and client_hello_sni(hello[:20]) is None


def test_a_body_sent_after_100_continue_is_not_waited_for(world):
    # curl asks `Expect: 100-continue` before a larger body: the proxy must pass the head on at
    # once (and scan the body as it passes) rather than wait for a body that waits for it
    s = socket.create_connection(("127.0.0.1", world["proxy"].port), timeout=10)
    s.sendall(f"POST http://other.test:{world['pp']}/up HTTP/1.1\r\nHost: other.test\r\nContent-Length: 5\r\n"
              f"Expect: 100-continue\r\n\r\n".encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 100")
    s.sendall(b"hello")
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    assert data.startswith(b"HTTP/1.1 200")
    s.close()
    assert world["plain"].seen[-1]["body"] == "hello"


def test_a_brokered_value_never_goes_over_plain_http(world):
    # api.test brokers the secret, but http:// would carry the real value in clear: refused
    proxy = world["proxy"]
    old = proxy.state
    n = len(world["plain"].seen)
    try:
        proxy.reconfigure({**world["cfg"], "allow": [*world["cfg"]["allow"], f"api.test:{world['pp']}",
                                                      f"127.0.0.1:{world['pp']}"]})
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        c.request("GET", f"http://api.test:{world['pp']}/", headers={"Authorization": f"Bearer {PH}"})
        r = c.getresponse()
        assert r.status == 403 and b"over https only" in r.read()
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        c.request("GET", f"http://api.test:{world['pp']}/", headers={"X-None": "x"})
        assert c.getresponse().status == 200  # without the placeholder it is an ordinary request
    finally:
        proxy.state = old
    assert [g["headers"].get("Authorization") for g in world["plain"].seen[n:]] == [None]
