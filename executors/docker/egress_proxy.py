"""The egress proxy: an allowlisting HTTP proxy that runs inside the proxy container.

STANDARD LIBRARY ONLY, Python 3.9+. The proxy container has no copy of runner: `Egress` runs
this file's source as `python3 -I -u -c SOURCE CONFIG_JSON`, SOURCE first installing the
allowlist grammar (executors/allowlist.py, also stdlib only) as a module. It can also be imported (the tests
and `Egress` use `parse_allow` and `decide` to validate the allowlist before starting anything).

What it does:
- `CONNECT host:port` (https and any TCP) and absolute-URI `METHOD http://host[:port]/path`
  (plain http) for clients whose address is in `clients` (the sandbox network);
- allows a target only when host:port is in the allowlist (executors/allowlist.py: a host name,
  case-insensitive, or *.domain for any name under it; an entry without a port means 80 and
  443; IP literals and CIDRs match addresses);
- resolves names itself and refuses when ANY address is loopback, link-local (incl. the cloud
  metadata address), private, CGNAT, unspecified, multicast, reserved or otherwise not global,
  unless an IP/CIDR entry of the allowlist covers that address (a hostname entry never does);
- connects to an address it checked (no second lookup);
- refuses with HTTP 403 and a one-line `runner egress: ...` body;
- is bounded: at most `max_conns` connections, a cap on the request head, idle timeouts,
  fixed-size relay buffers.
"""
from __future__ import annotations

import ipaddress
import json
import select
import socket
import sys
import threading
import time

try:
    from .. import allowlist  # imported as executors.docker.egress_proxy
except ImportError:  # run as `python3 -I -c SOURCE` in the proxy container: egress.py's SOURCE installed it
    import runner_egress_allowlist as allowlist  # type: ignore[no-redef]

DEFAULT_PORTS = (80, 443)
MAX_HEAD = 16 * 1024
CHUNK = 64 * 1024
READY = "runner-egress ready"

_NAMED = (
    # (network, description) checked in order; the first that contains the address names it.
    ("0.0.0.0/8", "an unspecified ('this network')"),
    ("127.0.0.0/8", "a loopback"),
    ("169.254.0.0/16", "a link-local"),
    ("10.0.0.0/8", "a private"),
    ("172.16.0.0/12", "a private"),
    ("192.168.0.0/16", "a private"),
    ("100.64.0.0/10", "a CGNAT (shared)"),
    ("224.0.0.0/4", "a multicast"),
    ("240.0.0.0/4", "a reserved"),
    ("255.255.255.255/32", "a broadcast"),
    ("::/128", "an unspecified"),
    ("::1/128", "a loopback"),
    ("fe80::/10", "a link-local"),
    ("fc00::/7", "a private (unique local)"),
    ("ff00::/8", "a multicast"),
)
_NAMED_NETS = [(ipaddress.ip_network(n), what) for n, what in _NAMED]


class Refused(Exception):
    """A request the allowlist does not permit; str() is the one-line reason."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.status = status


def _unmap(addr):
    """::ffff:a.b.c.d (and the like) checked as the IPv4 address it carries."""
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def special(addr) -> str | None:
    """'a link-local' etc. when `addr` must not be reached unless listed, else None."""
    addr = _unmap(addr)
    for net, what in _NAMED_NETS:
        if addr.version == net.version and addr in net:
            return what
    if addr.is_loopback:
        return "a loopback"
    if addr.is_link_local:
        return "a link-local"
    if addr.is_multicast:
        return "a multicast"
    if addr.is_unspecified:
        return "an unspecified"
    if addr.is_reserved:
        return "a reserved"
    if addr.is_private or not addr.is_global:
        return "a non-global"
    return None


def split_host_port(text: str, default_ports=None):
    """'host:port', '[v6]:port', 'host' -> (host, [ports]). Raises ValueError."""
    text = text.strip()
    if not text:
        raise ValueError("empty host")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"unclosed [ in {text!r}")
        if not rest:
            ports = None
        elif rest.startswith(":"):
            ports = [rest[1:]]
        else:
            raise ValueError(f"junk after ] in {text!r}")
    elif text.count(":") == 1:
        host, port = text.split(":")
        ports = [port]
    elif ":" in text:  # a bare IPv6 address or network
        host, ports = text, None
    else:
        host, ports = text, None
    if ports is None:
        if default_ports is None:
            raise ValueError(f"{text!r} has no port")
        return host, list(default_ports)
    try:
        port = int(ports[0], 10)
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return host, [port]


def parse_allow(entries) -> list:
    """Allowlist entries -> rules (allowlist.Entry), in the grammar the policy and the agent read.
    Raises ValueError naming the bad entry."""
    return allowlist.parse(entries)


def decide(rules, host: str, port: int, resolve=None) -> list:
    """The addresses (checked, in order) that host:port may be reached at, or Refused.

    `resolve(host, port)` returns a list of ip_address objects; the default is getaddrinfo.
    """
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    literal = allowlist.ip_literal(host)
    if literal is not None:
        if allowlist.address_allowed(rules, literal, port):
            return [_unmap(literal)]
        what = special(literal)
        if what:
            raise Refused(f"runner egress: {shown} is {what} address and not listed")
        raise Refused(f"runner egress: {shown} is not in the allowlist")
    name = host.rstrip(".").lower()
    if not allowlist.name_allowed(rules, name, port):
        raise Refused(f"runner egress: {shown} is not in the allowlist")
    try:
        addrs = (resolve or _resolve)(name, port)
    except OSError as e:
        raise Refused(f"runner egress: cannot resolve {name}: {e}", status=502) from None
    if not addrs:
        raise Refused(f"runner egress: {name} resolves to no address", status=502)
    checked = []
    for a in addrs:
        a = _unmap(a)
        what = special(a)
        if what and not allowlist.address_allowed(rules, a, port):
            raise Refused(f"runner egress: {shown} resolves to {a}, {what} address; only an IP or CIDR "
                          f"entry can allow that")
        checked.append(a)
    return checked


def _resolve(name: str, port: int) -> list:
    out = []
    for family, _, _, _, sa in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6):
            a = ipaddress.ip_address(sa[0].split("%", 1)[0])
            if a not in out:
                out.append(a)
    return out


# -- the server ----------------------------------------------------------------------------

class Proxy:
    def __init__(self, cfg: dict) -> None:
        self.rules = parse_allow(cfg.get("allow", []))
        self.port = int(cfg.get("port", 3128))
        self.clients = [ipaddress.ip_network(c, strict=False) for c in cfg.get("clients", [])]
        self.max_conns = int(cfg.get("max_conns", 64))
        self.idle = float(cfg.get("idle_timeout", 120))
        self.head_timeout = float(cfg.get("head_timeout", 15))
        self.connect_timeout = float(cfg.get("connect_timeout", 10))
        self.slots = threading.BoundedSemaphore(self.max_conns)
        self.log_lock = threading.Lock()

    def log(self, *parts) -> None:
        with self.log_lock:
            print(time.strftime("%H:%M:%S"), *parts, flush=True)

    def serve(self) -> None:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", self.port))
        srv.listen(128)
        self.log(READY, self.port, "allow", len(self.rules), "rule(s)")
        while True:
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            if self.clients and not any(ipaddress.ip_address(peer[0]) in n for n in self.clients):
                self.log("drop client", peer[0], "(not on the sandbox network)")
                conn.close()
                continue
            if not self.slots.acquire(blocking=False):
                self.log("busy: refusing", peer[0])
                self._reply(conn, 503, f"runner egress: too many connections (limit {self.max_conns})")
                conn.close()
                continue
            t = threading.Thread(target=self._handle, args=(conn, peer), daemon=True)
            try:
                t.start()
            except RuntimeError:
                self.slots.release()
                conn.close()

    # one client connection
    def _handle(self, conn, peer) -> None:
        upstream = None
        try:
            conn.settimeout(self.head_timeout)
            head, rest = self._read_head(conn)
            if head is None:
                return
            method, target, version, headers = self._parse(head)
            if method == "CONNECT":
                host, ports = split_host_port(target)
                port = ports[0]
                addrs = decide(self.rules, host, port)
                upstream = self._connect(addrs, port, f"{host}:{port}")
                self.log("CONNECT", peer[0], "->", f"{host}:{port}", "via", upstream.getpeername()[0])
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                host, port, path = self._absolute(target)
                addrs = decide(self.rules, host, port)
                upstream = self._connect(addrs, port, f"{host}:{port}")
                self.log(method, peer[0], "->", f"{host}:{port}", "via", upstream.getpeername()[0])
                authority = (f"[{host}]" if ":" in host else host) + ("" if port == 80 else f":{port}")
                lines = [f"{method} {path} {version}"]
                for k, v in headers:
                    lk = k.lower()
                    if lk in ("host", "connection", "keep-alive") or lk.startswith("proxy-"):
                        continue
                    lines.append(f"{k}: {v}")
                lines += [f"Host: {authority}", "Connection: close"]
                upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + rest)
            self._relay(conn, upstream)
        except Refused as e:
            self.log("REFUSED", peer[0], str(e))
            self._reply(conn, e.status, str(e))
        except ValueError as e:
            self._reply(conn, 400, f"runner egress: bad request: {e}")
        except (OSError, socket.timeout):
            pass
        finally:
            for s in (upstream, conn):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
            self.slots.release()

    def _read_head(self, conn):
        buf = b""
        while b"\r\n\r\n" not in buf:
            if len(buf) > MAX_HEAD:
                self._reply(conn, 431, f"runner egress: request head larger than {MAX_HEAD} bytes")
                return None, b""
            try:
                data = conn.recv(4096)
            except socket.timeout:
                self._reply(conn, 408, "runner egress: no complete request head in time")
                return None, b""
            if not data:
                return None, b""
            buf += data
        head, _, rest = buf.partition(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            self._reply(conn, 431, f"runner egress: request head larger than {MAX_HEAD} bytes")
            return None, b""
        return head.decode("latin-1"), rest

    @staticmethod
    def _parse(head: str):
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise ValueError("malformed request line")
        headers = []
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep or not k or k != k.strip():
                raise ValueError("malformed header line")
            headers.append((k, v.strip()))
        return parts[0].upper(), parts[1], parts[2], headers

    @staticmethod
    def _absolute(target: str):
        low = target.lower()
        if low.startswith("https://"):
            raise Refused("runner egress: use CONNECT for https:// URLs (set HTTPS_PROXY)", status=400)
        if not low.startswith("http://"):
            raise Refused("runner egress: this is a proxy: send an absolute http:// URL or CONNECT", status=400)
        rest = target[7:]
        cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0] or [len(rest)])
        authority, path = rest[:cut], rest[cut:] or "/"
        if path[0] != "/":
            path = "/" + path
        if "@" in authority:
            raise ValueError("credentials in the URL are not forwarded")
        host, ports = split_host_port(authority, default_ports=(80,))
        return host, ports[0], path.split("#", 1)[0]

    def _connect(self, addrs, port, shown):
        last = None
        for a in addrs:
            family = socket.AF_INET6 if a.version == 6 else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(self.connect_timeout)
            try:
                s.connect((str(a), port))
                return s
            except OSError as e:
                last = e
                s.close()
        if isinstance(last, socket.timeout):
            raise Refused(f"runner egress: connecting to {shown} timed out", status=504)
        raise Refused(f"runner egress: cannot connect to {shown}: {last}", status=502)

    def _relay(self, a, b) -> None:
        """Copy both ways with fixed-size buffers until one side closes or both idle too long."""
        a.settimeout(self.idle)
        b.settimeout(self.idle)
        peers = {a: b, b: a}
        open_ = {a, b}
        while open_:
            ready, _, _ = select.select(list(open_), [], [], self.idle)
            if not ready:
                return  # idle
            for s in ready:
                try:
                    data = s.recv(CHUNK)
                except OSError:
                    return
                if not data:
                    open_.discard(s)
                    try:
                        peers[s].shutdown(socket.SHUT_WR)
                    except OSError:
                        return
                    continue
                peers[s].sendall(data)  # blocks (bounded by the idle timeout) on a slow reader

    @staticmethod
    def _reply(conn, status: int, reason: str) -> None:
        words = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
                 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
        body = (reason.replace("\r", " ").replace("\n", " ") + "\n").encode("utf-8", "replace")
        head = (f"HTTP/1.1 {status} {words.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Runner-Egress: refused\r\n\r\n")
        try:
            conn.settimeout(5)
            conn.sendall(head.encode("latin-1") + body)
            # Lingering close: read (a bounded amount of) what the client is still sending, so
            # closing with unread data does not reset the connection before it reads the reply.
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(1)
            drained = 0
            while drained < 256 * 1024:
                data = conn.recv(CHUNK)
                if not data:
                    break
                drained += len(data)
        except OSError:
            pass


def main(argv) -> None:
    cfg = json.loads(argv[1]) if len(argv) > 1 else {}
    Proxy(cfg).serve()


if __name__ == "__main__":
    main(sys.argv)
