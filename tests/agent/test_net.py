"""Network rules of http_fetch: refused before any socket, every hop and address checked.

No traffic leaves loopback: refusals are checked with DNS and connect replaced by tripwires,
and the only real server is one on 127.0.0.1 started here.
"""
from __future__ import annotations

import http.server
import socket
import threading

import pytest

from runner.agent import net
from runner.agent.context import Context
from runner.agent.htmltext import html_to_text
from runner.agent.result import ToolError


@pytest.fixture
def no_sockets(monkeypatch):
    """Any DNS lookup or connection fails the test."""
    def boom(*a, **k):
        raise AssertionError(f"network touched: {a}")
    monkeypatch.setattr(socket, "getaddrinfo", boom)
    monkeypatch.setattr(socket, "create_connection", boom)


def ctx(tmp_path, mode="allowlist", allow=(), env=None):
    return Context(str(tmp_path), network={"mode": mode, "allow": list(allow)}, env=env)


def test_mode_none_refuses_without_dns_or_connect(tmp_path, no_sockets):
    with pytest.raises(ToolError, match="network access is off"):
        net.check(ctx(tmp_path, "none"), "http://example.com/", "http_fetch")


@pytest.mark.parametrize("url, allow, why", [
    ("http://example.com/", ["other.com:80"], "not in the policy's network allowlist"),
    ("http://example.com:8080/", ["example.com:80"], "not in the policy's network allowlist"),
    ("http://example.com:8080/", ["example.com"], "not in the policy's network allowlist"),  # bare host: 80, 443
    ("http://169.254.169.254/latest/", ["169.254.169.254:80"], "never reached"),
    ("http://[fe80::1]/", ["[fe80::1]:80"], "never reached"),
    ("http://[::ffff:169.254.169.254]/", ["[::ffff:169.254.169.254]:80"], "never reached"),
    ("ftp://example.com/", ["example.com:21"], "only http and https"),
    ("http://user:pw@example.com/", ["example.com:80"], "user name or password"),
    ("http:///nohost", [], "no host"),
])
def test_refusals_before_any_socket(tmp_path, no_sockets, url, allow, why):
    with pytest.raises(ToolError, match=why):
        net.check(ctx(tmp_path, allow=allow), url, "http_fetch")


def test_private_and_loopback_need_the_exact_host_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, port, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", port))])
    with pytest.raises(ToolError, match="private or reserved"):
        net.check(ctx(tmp_path, allow=["*.corp.example:80"]), "http://db.corp.example/", "http_fetch")
    t = net.check(ctx(tmp_path, allow=["db.corp.example:80"]), "http://db.corp.example/x?y=1", "http_fetch")
    assert (t.ip, t.port, t.path, t.host) == ("10.0.0.5", 80, "/x?y=1", "db.corp.example")


def test_every_resolved_address_is_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, **k: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))])
    with pytest.raises(ToolError, match="never reached"):
        net.check(ctx(tmp_path, allow=["example.com:80"]), "http://example.com/", "http_fetch")


def test_public_address_under_a_wildcard_is_pinned(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, port, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))])
    t = net.check(ctx(tmp_path, allow=["*.example.com:443"]), "https://api.example.com/v1", "http_fetch")
    assert (t.ip, t.port, t.scheme) == ("93.184.216.34", 443, "https")


class _Redirector(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(302)
        self.send_header("Location", self.server.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def redirector():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("target, why", [
    ("http://169.254.169.254/latest/meta-data/", "not in the policy's network allowlist"),
    ("http://127.0.0.1:1/", "not in the policy's network allowlist"),
    ("file:///etc/passwd", "only http and https"),
])
def test_each_redirect_hop_is_checked_again(tmp_path, redirector, target, why):
    redirector.target = target
    port = redirector.server_address[1]
    c = ctx(tmp_path, allow=[f"127.0.0.1:{port}"])
    with pytest.raises(ToolError, match=why):
        net.get(c, f"http://127.0.0.1:{port}/", "http_fetch", 1000, 5)


def test_redirect_loops_stop_at_ten(tmp_path, redirector):
    port = redirector.server_address[1]
    redirector.target = f"http://127.0.0.1:{port}/again"
    with pytest.raises(ToolError, match="more than 10 redirects"):
        net.get(ctx(tmp_path, allow=[f"127.0.0.1:{port}"]), f"http://127.0.0.1:{port}/", "http_fetch", 1000, 5)


def test_proxy_from_the_environment_is_used_without_local_dns(tmp_path, monkeypatch):
    """In docker allowlist mode the sandbox reaches the world only through HTTP(S)_PROXY."""
    seen = {}

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen["line"] = self.requestline
            body = b"via proxy"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        real = socket.getaddrinfo

        def no_dns(host, *a, **k):
            assert host == "127.0.0.1", f"the agent resolved {host} although a proxy was set"
            return real(host, *a, **k)
        monkeypatch.setattr(socket, "getaddrinfo", no_dns)
        c = ctx(tmp_path, allow=["pypi.example:80"], env={"HTTP_PROXY": f"http://127.0.0.1:{srv.server_address[1]}"})
        res = net.http_fetch(c, {"url": "http://pypi.example/simple/"})
        assert not res.is_error and res.content.endswith("via proxy")
        assert seen["line"] == "GET http://pypi.example:80/simple/ HTTP/1.1"
        with pytest.raises(ToolError, match="not in the policy's network allowlist"):
            net.http_fetch(c, {"url": "http://other.example/"})
    finally:
        srv.shutdown()
        srv.server_close()


def test_only_safe_headers():
    with pytest.raises(ToolError, match="cannot be set"):
        net._headers({"Cookie": "a=b"})
    assert net._headers({"accept-language": "fr"})["Accept-Language"] == "fr"


def test_html_to_text():
    html = ("<html><head><title>T</title><style>x{}</style></head><body><h2>Head</h2><p>a <a href='https://x.y/'>"
            "link</a> b</p><pre>  keep\n    this</pre><img alt='cat'><script>bad()</script></body></html>")
    text = html_to_text(html)
    assert text.startswith("# T")
    assert "## Head" in text and "[link](https://x.y/)" in text and "[Image: cat]" in text
    assert "  keep\n    this" in text and "bad()" not in text and "x{}" not in text
