"""Red-team cases against the egress proxy (issue 49 review), run in this process against real
servers on loopback, with the names resolved by a resolver the test controls (the `world` of
test_egress_broker.py: api.test brokers GITHUB_TOKEN over TLS intercepted with a session CA)."""
from __future__ import annotations

import socket
import ssl
import threading

import pytest

pytest.importorskip("cryptography")

from executors.docker.egress import _LogTail  # noqa: E402
from executors.docker.egress_proxy import EVENT  # noqa: E402

from .test_egress_broker import PH, client_ctx, world  # noqa: E402,F401  (world: the fixture)


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
    "X-A: a\nHost: other.test",  # a bare LF: one header to the proxy, two to a lenient server
    "X-A: a\rHost: other.test",
    "X-A: a\x00b",
])
def test_a_header_cannot_hide_a_second_host_from_the_proxy(world, smuggled):
    # The proxy checks the one Host header it parsed; a server that takes a bare LF (or CR) for a
    # line end would read another Host (another site of a shared front end, with the real value
    # in Authorization). A request head with a control character is refused before it goes on.
    n = len(world["https"].seen)
    answer = _intercepted(world, f"GET / HTTP/1.1\r\nHost: api.test:{world['hp']}\r\n{smuggled}\r\n"
                                 f"Authorization: Bearer {PH}\r\n\r\n".encode("latin-1"))
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert len(world["https"].seen) == n  # nothing reached the server
