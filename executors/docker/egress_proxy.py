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
  fixed-size relay buffers;
- brokers secrets (cfg `broker`: name, placeholder, value, hosts): on a connection to a host a
  secret lists, the placeholder is replaced by the real value in the request's headers (a Basic
  authorization's user:password too); https to such a host is intercepted with a leaf
  certificate the controller made for it (cfg `tls`, signed by the session's CA, whose key never
  leaves the controller) after checking SNI and Host against the CONNECT target, and the real
  server is verified against cfg `trust` (the host's trust store, or the host's own CA file).
  A placeholder on its way anywhere else (head, URL or body, in clear) is refused as an
  attempted exfiltration; the real value in an answer is masked before the sandbox sees it;
- reads its configuration as JSON lines on stdin when cfg says `control: stdin` (so secret
  values are never in its command line): the first before it serves, each later one replacing
  the allowlist and brokering for new connections (live policy change);
- logs every request as an `EVENT {json}` line (client, host, port, method and path when it can
  see them, bytes each way, allowed or refused and why), which the controller audits.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import select
import socket
import ssl
import sys
import tempfile
import threading
import time

try:
    from .. import allowlist  # imported as executors.docker.egress_proxy
except ImportError:  # run as `python3 -I -c SOURCE` in the proxy container: egress.py's SOURCE installed it
    import runner_egress_allowlist as allowlist  # type: ignore[no-redef]

DEFAULT_PORTS = (80, 443)
MAX_HEAD = 16 * 1024
MAX_BODY_SCAN = 1024 * 1024  # a request body up to this (Content-Length) is read whole and checked before sending
CHUNK = 64 * 1024
READY = "runner-egress ready"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # C0 controls but the tab, and DEL
_CONTROL_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # escaped in log lines
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a method or a header name (RFC 9110 token)
EVENT = "EVENT"

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


# -- brokering -----------------------------------------------------------------------------

def _forms(text: str) -> list:
    """The byte forms a placeholder is looked for in (and a value masked in): itself and its
    base64 at the three alignments (inside a Basic authorization, a JSON blob of it), without
    the characters the neighbouring bytes decide."""
    raw = text.encode("utf-8")
    out = [raw]
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).rstrip(b"=")
        enc = enc[(0, 2, 3)[shift]:]  # characters that carry bits of the bytes before
        enc = enc[:len(enc) - 1]  # the last may carry bits of the bytes after
        if len(enc) >= 8:
            out.append(enc)
    return out


_FRAME = rb"\r\n[0-9A-Fa-f]{1,8}(?:;[^\r\n]{0,64})?\r\n"  # the framing between two chunks of a chunked body
_FRAME_MAX = 2 + 8 + 65 + 2
_FRAME_SPLIT = re.compile(b"(" + _FRAME + b")")
_FRAME_ANY = re.compile(_FRAME)
_FRAME_CUT = re.compile(rb"\r(?:\n(?:[0-9A-Fa-f]{1,8}(?:;[^\r\n]{0,64})?\r?)?)?\Z")  # a frame the data ends in


def _framed(form: bytes):
    """A pattern of `form` that also matches it cut by chunked framing between any two bytes (an
    answer's chunks may end inside a value it echoes)."""
    return re.compile((b"(?:" + _FRAME + b")?").join(re.escape(form[i:i + 1]) for i in range(len(form))))


class Broker:
    """One brokered secret: its placeholder, its real value, the hosts it goes to."""

    def __init__(self, d: dict) -> None:
        self.name = str(d["name"])
        self.placeholder = str(d["placeholder"])
        self.value = str(d["value"])
        self.hosts = {h.lower().rstrip(".") for h in d.get("hosts", [])}
        self.ph_forms = _forms(self.placeholder)
        self.value_b = self.value.encode("utf-8")
        self.value_forms = _forms(self.value)
        self.value_patterns = [_framed(f) for f in self.value_forms]


class State:
    """Everything a new connection is decided by; replaced whole by a configuration line."""

    def __init__(self, cfg: dict, old: "State | None" = None) -> None:
        self.rules = parse_allow(cfg.get("allow", []))
        self.brokers = [Broker(b) for b in cfg.get("broker", [])]
        self.tls = dict(cfg.get("tls", {}))  # host -> {"cert": PEM, "key": PEM}
        self.trust = dict(cfg.get("trust", {}))  # host -> CA PEM (else "*": the host's trust store)
        self._server_ctx: dict = {}
        self._client_ctx: dict = {}
        self._lock = threading.Lock()

    def brokered(self, host: str) -> bool:
        return any(host in b.hosts for b in self.brokers)

    def server_context(self, host: str):
        with self._lock:
            ctx = self._server_ctx.get(host)
            if ctx is not None:
                return ctx
            pair = self.tls.get(host)
            if not pair:
                raise Refused(f"runner egress: no certificate for {host} (brokered host without interception)",
                              status=502)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            # load_cert_chain reads files only: the leaf's key is on a tmpfs for the moment it is read
            fd, path = tempfile.mkstemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(pair["cert"] + "\n" + pair["key"])
                ctx.load_cert_chain(path)
            finally:
                os.unlink(path)

            def sni(_sock, name, _ctx, host=host):
                if name is not None and name.lower().rstrip(".") != host:
                    _handshake.mismatch = name  # each connection has its own thread
                    return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
                return None

            ctx.sni_callback = sni
            self._server_ctx[host] = ctx
            return ctx

    def client_context(self, host: str):
        with self._lock:
            ctx = self._client_ctx.get(host)
            if ctx is None:
                pem = self.trust.get(host) or self.trust.get("*")
                ctx = ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()
                self._client_ctx[host] = ctx
            return ctx


_handshake = threading.local()


def client_hello_sni(data: bytes):
    """The server name of a TLS ClientHello at the start of `data`: a str, "" when the hello
    names none, or None when `data` is not (the whole first record of) a ClientHello."""
    if len(data) < 5 or data[0] != 0x16 or data[1] != 3:
        return None
    end = 5 + int.from_bytes(data[3:5], "big")
    rec = data[5:end]
    if len(data) < end or len(rec) < 4 or rec[0] != 1:
        return None
    try:
        i = 4 + 2 + 32  # handshake header, version, random
        i += 1 + rec[i]  # session id
        i += 2 + int.from_bytes(rec[i:i + 2], "big")  # cipher suites
        i += 1 + rec[i]  # compression methods
        if i + 2 > len(rec):
            return ""
        stop = i + 2 + int.from_bytes(rec[i:i + 2], "big")
        i += 2
        while i + 4 <= min(stop, len(rec)):
            kind, size = int.from_bytes(rec[i:i + 2], "big"), int.from_bytes(rec[i + 2:i + 4], "big")
            body = rec[i + 4:i + 4 + size]
            if kind == 0:  # server_name: list length, then (type 0, length, name)
                if len(body) >= 5 and body[2] == 0:
                    n = int.from_bytes(body[3:5], "big")
                    return body[5:5 + n].decode("ascii", "replace")
                return ""
            i += 4 + size
    except IndexError:
        return None
    return ""


def _name(host: str) -> str:
    """A host name as the brokering compares it (lower case, no final dot); an address as is."""
    return host if allowlist.ip_literal(host) is not None else host.rstrip(".").lower()


class Exfiltration(Refused):
    """A placeholder on its way to a host its secret is not for."""


class Scanner:
    """Looks for placeholders of secrets not meant for `host` in a stream cut into chunks (a form
    split across two chunks is caught: the tail of each chunk is kept for the next)."""

    def __init__(self, brokers, host: str) -> None:
        self.forms = [(b, f) for b in brokers if host not in b.hosts for f in b.ph_forms]
        self.keep = max((len(f) for _, f in self.forms), default=1) - 1
        self.tail = b""

    def check(self, data: bytes) -> None:
        if not self.forms:
            return
        window = self.tail + data
        for b, f in self.forms:
            if f in window:
                raise Exfiltration(f"runner egress: the placeholder of secret {b.name} may only go to "
                                   f"{', '.join(sorted(b.hosts))}: refused (attempted exfiltration)")
        self.tail = window[-self.keep:] if self.keep else b""


class Masker:
    """Masks real secret values in an answer on its way to the sandbox, in a stream cut into
    chunks (same length, so framing stays right; a value split across chunks is held back).

    The answer's head is held until it is whole and checked first: an answer whose content or
    transfer coding is anything but identity (the proxy asked for identity) is refused, since
    the masker would see only compressed bytes of a value the sandbox then decompresses."""

    def __init__(self, brokers) -> None:
        # the value and its base64 at every alignment (an echoed Basic authorization decodes to it)
        self.values = [f for b in brokers if len(b.value_b) >= 4 for f in b.value_forms]
        self.patterns = [p for b in brokers if len(b.value_b) >= 4 for p in b.value_patterns]
        # the longest a value can stretch: every byte in a chunk of its own
        self.keep = max((len(v) + (len(v) - 1) * _FRAME_MAX for v in self.values), default=1) - 1
        self.held = b""
        self.masked = 0
        self.in_head = bool(self.values)  # until the final (non-1xx) answer's head has been checked

    def _heads(self, buf: bytes) -> int:
        """Check the answer heads at the start of `buf` (Refused for one the masker could not
        read past); how many bytes of it are checked heads (all of it once the final one is)."""
        at = 0
        while self.in_head:
            stop = buf.find(b"\r\n\r\n", at)
            if stop < 0:
                if len(buf) - at > MAX_HEAD * 4:
                    raise Refused("runner egress: the answer's head is too large to check", status=502)
                return at
            head = buf[at:stop].decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/"):
                raise Refused("runner egress: the answer is not HTTP", status=502)
            for line in lines[1:]:
                k, _, v = line.partition(":")
                k, codings = k.strip().lower(), [c.strip().lower() for c in v.split(",") if c.strip()]
                if (k == "content-encoding" and set(codings) - {"identity"}) or (
                        k == "transfer-encoding" and set(codings) - {"identity", "chunked"}):
                    raise Refused(f"runner egress: the answer is compressed ({k}: {v.strip()[:40]}) though the "
                                  "proxy asked for identity: refused, a secret's value in it could not be masked",
                                  status=502)
            at = stop + 4
            if parts[1] == "101":  # what follows is no longer HTTP (a websocket may deflate it)
                raise Refused("runner egress: a protocol switch (101) on a connection that brokers secrets: "
                              "refused, what follows could not be masked", status=502)
            if not parts[1].startswith("1"):
                self.in_head = False
        return len(buf)

    def _blank(self, m) -> bytes:
        """A value found (perhaps cut by chunked framing) in stars of its length, framing kept."""
        self.masked += 1
        return b"".join(part if i % 2 else b"*" * len(part) for i, part in enumerate(_FRAME_SPLIT.split(m.group())))

    def feed(self, data: bytes) -> bytes:
        if not self.values:
            return data
        buf = self.held + data
        checked = self._heads(buf) if self.in_head else len(buf)
        if b"\r\n" in buf or any(v in buf for v in self.values):  # (no CRLF: no framing can cut a value)
            for pat in self.patterns:
                buf = pat.sub(self._blank, buf)
        if not data:  # the end: nothing more can complete a value
            self.held = b""
            return buf
        if self.in_head:  # interim answers (100 Continue) go on; the final head is awaited whole
            self.held = buf[checked:]
            return buf[:checked]
        cut = self._cut(buf)
        self.held = buf[cut:]
        return buf[:cut]

    def _cut(self, buf: bytes) -> int:
        """Where what may go on ends: the first place in the last `keep` bytes from which the rest
        could still grow into a value (cut by framing or not); else all of it goes on (a stream
        of small events is held back only by what could be the start of a value)."""
        start, best = max(0, len(buf) - self.keep), len(buf)
        for v in self.values:
            p = buf.find(v[:1], start, best)
            while p >= 0:
                nxt = buf[p + 1:p + 2]
                if nxt in (b"", b"\r", v[1:2]):  # (most places fail here, cheaply)
                    plain = _FRAME_CUT.sub(b"", _FRAME_ANY.sub(b"", buf[p:]))
                    if v.startswith(plain):
                        best = p
                        break
                p = buf.find(v[:1], p + 1, best)
        return best


def substitute_headers(headers, brokers, host: str):
    """Headers with the placeholders of `host`'s secrets replaced by their values (also inside a
    Basic authorization), and the names of the secrets used. Raises Exfiltration for a
    placeholder of a secret not meant for `host`."""
    used = []
    out = []
    for k, v in headers:
        for b in brokers:
            text = f"{k}: {v}".encode("latin-1", "replace")
            if not any(f in text for f in b.ph_forms):
                continue
            if host not in b.hosts:
                raise Exfiltration(f"runner egress: the placeholder of secret {b.name} may only go to "
                                   f"{', '.join(sorted(b.hosts))}: refused (attempted exfiltration)")
            if b.placeholder in v:
                v = v.replace(b.placeholder, b.value)
            scheme, _, cred = v.partition(" ")
            if scheme.lower() == "basic" and cred:
                try:
                    plain = base64.b64decode(cred.strip(), validate=True).decode("utf-8")
                except (ValueError, UnicodeDecodeError):
                    plain = ""
                if b.placeholder in plain:
                    v = f"{scheme} " + base64.b64encode(plain.replace(b.placeholder, b.value).encode()).decode()
            if b.name not in used:
                used.append(b.name)
        out.append((k, v))
    return out, used


# -- the server ----------------------------------------------------------------------------

class Proxy:
    def __init__(self, cfg: dict, resolve=None) -> None:
        self.state = State(cfg)
        self.port = int(cfg.get("port", 3128))
        self.bind = cfg.get("bind", "0.0.0.0")
        self.clients = [ipaddress.ip_network(c, strict=False) for c in cfg.get("clients", [])]
        self.max_conns = int(cfg.get("max_conns", 64))
        self.idle = float(cfg.get("idle_timeout", 120))
        self.head_timeout = float(cfg.get("head_timeout", 15))
        self.connect_timeout = float(cfg.get("connect_timeout", 10))
        self.slots = threading.BoundedSemaphore(self.max_conns)
        self.log_lock = threading.Lock()
        self.resolve = resolve
        self.events = None  # a callable that gets each event (tests); else EVENT lines on stdout
        self.sock = None
        # The audit budget: each request is an audit line on the controller, in a log tenants
        # share and that rotates by size; a sandbox making connections as fast as it can would
        # push everyone's records out. Past `event_burst` (refilled at `event_rate` a second) the
        # requests are counted, not itemised, and the count goes out as one event when it can.
        self.clock = time.monotonic
        self.event_burst = float(cfg.get("event_burst", 200))
        self.event_rate = float(cfg.get("event_rate", 20))
        self._tokens, self._stamp = self.event_burst, self.clock()
        self._unlisted: dict = {}  # (decision, exfiltration) -> requests not itemised
        self._budget_lock = threading.Lock()

    @property
    def rules(self):
        return self.state.rules

    def reconfigure(self, cfg: dict) -> None:
        """A new allowlist and brokering for the connections accepted from now on."""
        new = State(cfg)
        self.state = new
        self.event({"event": "policy", "allow": len(new.rules), "brokered": [b.name for b in new.brokers]})

    def log(self, *parts) -> None:
        """One line for people, on stderr: stdout carries only the EVENT lines the controller
        audits, and what the sandbox sent (a method, a path, a name) is shown with its control
        characters escaped, so no part of a request can start a line of its own."""
        text = " ".join(str(p) for p in parts)
        text = _CONTROL_ANY.sub(lambda m: repr(m.group())[1:-1], text)
        with self.log_lock:
            print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)

    def event(self, ev: dict) -> None:
        """Report one event: an `egress` one within the audit budget, else counted (see __init__)."""
        if ev.get("event") != "egress":
            self._emit(ev)
            return
        with self._budget_lock:
            if not self._take():
                key = (ev.get("decision"), bool(ev.get("exfiltration")))
                self._unlisted[key] = self._unlisted.get(key, 0) + 1
                return
        self.flush_unlisted()
        self._emit(ev)

    def _take(self) -> bool:
        now = self.clock()
        if now > self._stamp:
            self._tokens = min(self.event_burst, self._tokens + (now - self._stamp) * self.event_rate)
            self._stamp = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def flush_unlisted(self) -> None:
        """The requests counted but not itemised, as one event (when the budget has room)."""
        with self._budget_lock:
            if not self._unlisted or not self._take():
                return
            counts, self._unlisted = self._unlisted, {}
        n = sum(counts.values())
        refused = sum(c for (d, _), c in counts.items() if d != "allowed")
        exfil = sum(c for (_, x), c in counts.items() if x)
        self._emit({"event": "egress", "client": None, "host": None, "port": None, "method": None, "path": None,
                    "intercepted": False, "bytes_up": 0, "bytes_down": 0,
                    "decision": "refused" if refused else "allowed", "secrets": [], "exfiltration": bool(exfil),
                    "unlisted": n, "reason": f"{n} request(s) over the audit budget ({self.event_rate:g} a second "
                                             f"past {self.event_burst:g}) not itemised: {n - refused} allowed, "
                                             f"{refused} refused, {exfil} of them as attempted exfiltration"})

    def _flusher(self) -> None:
        while self.sock is not None:
            time.sleep(1.0)
            self.flush_unlisted()

    def _emit(self, ev: dict) -> None:
        if self.events is not None:
            self.events(ev)
            return
        line = json.dumps(ev, separators=(",", ":"), ensure_ascii=True)
        with self.log_lock:
            print(EVENT, line, flush=True)

    def listen(self):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((self.bind, self.port))
        srv.listen(128)
        self.sock = srv
        self.port = srv.getsockname()[1]
        return srv

    def serve(self) -> None:
        srv = self.sock or self.listen()
        threading.Thread(target=self._flusher, name="runner-egress-audit", daemon=True).start()
        self.log(READY, self.port, "allow", len(self.rules), "rule(s)")
        while True:
            try:
                conn, peer = srv.accept()
            except OSError:
                if self.sock is None:
                    return
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

    def close(self) -> None:
        srv, self.sock = self.sock, None
        if srv is not None:
            try:
                srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            srv.close()

    # one client connection
    def _handle(self, conn, peer) -> None:
        upstream = None
        st = self.state  # the policy this connection is decided by, whatever changes meanwhile
        ev = {"event": "egress", "client": peer[0], "host": None, "port": None, "method": None, "path": None,
              "intercepted": False, "bytes_up": 0, "bytes_down": 0, "decision": "allowed", "reason": None,
              "secrets": [], "exfiltration": False}
        try:
            conn.settimeout(self.head_timeout)
            head, rest = self._read_head(conn)
            if head is None:
                return
            method, target, version, headers = self._parse(head)
            ev["method"] = method
            if method == "CONNECT":
                host, ports = split_host_port(target)
                port = ports[0]
                ev.update(host=host, port=port)
                addrs = decide(st.rules, host, port, self.resolve)
                name = _name(host)
                if st.brokered(name):
                    ev.update(intercepted=True, method=None, host=name)
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    self._intercept(conn, rest, name, port, addrs, st, ev)
                    return
                upstream = self._connect(addrs, port, f"{host}:{port}")
                self.log("CONNECT", peer[0], "->", f"{host}:{port}", "via", upstream.getpeername()[0])
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                scan = Scanner(st.brokers, name)
                rest = self._check_sni(conn, upstream, rest, name, ev)
                if rest:
                    scan.check(rest)
                    upstream.sendall(rest)
                    ev["bytes_up"] += len(rest)
                self._relay(conn, upstream, ev, scan, None)
            else:
                host, port, path = self._absolute(target)
                ev.update(host=host, port=port, path=path.split("?", 1)[0][:200])
                addrs = decide(st.rules, host, port, self.resolve)
                name = _name(host)
                scan = Scanner(st.brokers, name)
                scan.check(target.encode("latin-1", "replace"))
                headers, ev["secrets"] = substitute_headers(headers, st.brokers, name)
                if ev["secrets"]:  # the real value never crosses a network in clear
                    raise Refused(f"runner egress: secret {', '.join(ev['secrets'])} goes to {name} over https only",
                                  status=403)
                rest = self._read_body(conn, headers, rest)
                scan.check(rest)
                upstream = self._connect(addrs, port, f"{host}:{port}")
                self.log(method, peer[0], "->", f"{host}:{port}", "via", upstream.getpeername()[0])
                authority = (f"[{host}]" if ":" in host else host) + ("" if port == 80 else f":{port}")
                self._forward(upstream, method, path, version, headers, authority, rest, st.brokered(name), ev)
                self._relay(conn, upstream, ev, scan, Masker(st.brokers) if st.brokered(name) else None)
        except Refused as e:
            ev.update(decision="refused", reason=str(e), exfiltration=isinstance(e, Exfiltration))
            self.log("REFUSED", peer[0], str(e))
            if not ev.get("replied"):
                self._reply(conn, e.status, str(e))
        except ValueError as e:
            ev.update(decision="refused", reason=f"bad request: {e}")
            self._reply(conn, 400, f"runner egress: bad request: {e}")
        except (OSError, socket.timeout) as e:
            if ev["reason"] is None:
                ev["reason"] = f"{type(e).__name__}: {e}"[:200]
        finally:
            for s in (upstream, conn):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
            self.slots.release()
            ev.pop("replied", None)
            if ev["host"] is not None or ev["decision"] == "refused":
                self.event(ev)

    def _forward(self, upstream, method, path, version, headers, authority, rest, brokered, ev) -> None:
        lines = [f"{method} {path} {version}"]
        for k, v in headers:
            lk = k.lower()
            if lk in ("host", "connection", "keep-alive") or lk.startswith("proxy-"):
                continue
            if brokered and lk == "accept-encoding":  # an answer the masker can read
                continue
            lines.append(f"{k}: {v}")
        if brokered:
            lines.append("Accept-Encoding: identity")
        lines += [f"Host: {authority}", "Connection: close"]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + rest
        upstream.sendall(data)
        ev["bytes_up"] += len(data)

    def _intercept(self, conn, rest, host, port, addrs, st, ev):
        """TLS to the sandbox with the session CA's leaf for `host`, one request read, its
        headers brokered, sent on over TLS verified against the trust for `host`."""
        if rest:
            raise Refused("runner egress: data before the TLS handshake", status=400)
        ctx = st.server_context(host)
        conn.settimeout(self.head_timeout)
        _handshake.mismatch = None
        try:
            tls = ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as e:
            ev["replied"] = True
            mismatch = _handshake.mismatch
            raise Refused(f"runner egress: TLS with the sandbox failed for {host}: "
                          f"{'SNI names ' + repr(mismatch) if mismatch else e}", status=400) from None
        ev["replied"] = True  # no plain-text reply inside TLS: answers go through _reply_tls
        try:
            head, body = self._read_head(tls)
            if head is None:
                return
            method, target, version, headers = self._parse(head)
            ev["method"] = method
            if method == "CONNECT":
                raise Refused("runner egress: CONNECT inside an intercepted connection", status=400)
            if target.lower().startswith(("http://", "https://")):
                u_host, u_port, target = self._absolute("http://" + target.split("://", 1)[1])
                if u_host.lower().rstrip(".") != host:
                    raise Refused(f"runner egress: request for {u_host} inside a connection to {host}", status=421)
            ev["path"] = target.split("?", 1)[0][:200]
            hosts = [v for k, v in headers if k.lower() == "host"]
            if len(hosts) != 1:
                raise Refused("runner egress: an intercepted request needs exactly one Host header", status=400)
            h_host, h_ports = split_host_port(hosts[0], default_ports=(port,))
            if h_host.lower().rstrip(".") != host or h_ports[0] != port:
                raise Refused(f"runner egress: Host {hosts[0]!r} inside a connection to {host}:{port}", status=421)
            scan = Scanner(st.brokers, host)
            scan.check(target.encode("latin-1", "replace"))
            headers, ev["secrets"] = substitute_headers(headers, st.brokers, host)
            body = self._read_body(tls, headers, body)
            scan.check(body)
            raw = self._connect(addrs, port, f"{host}:{port}")
            try:
                upstream = st.client_context(host).wrap_socket(raw, server_hostname=host)
            except ssl.SSLError as e:
                raw.close()
                raise Refused(f"runner egress: {host}:{port} failed verification: {e}", status=502) from None
            except OSError as e:
                raw.close()
                raise Refused(f"runner egress: TLS to {host}:{port} failed: {e}", status=502) from None
            self.log("BROKER", ev["client"], "->", f"{host}:{port}", method, ev["path"], "secrets", ev["secrets"])
            authority = host + ("" if port == 443 else f":{port}")
            try:
                self._forward(upstream, method, target, version, headers, authority, body, True, ev)
                self._relay(tls, upstream, ev, scan, Masker(st.brokers))
            finally:
                upstream.close()
        except Refused as e:
            self._reply(tls, e.status, str(e))
            raise
        except ValueError as e:  # answered inside the TLS, where the sandbox reads it
            why = Refused(f"runner egress: bad request: {e}", status=400)
            self._reply(tls, why.status, str(why))
            raise why from None
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def _check_sni(self, conn, upstream, rest: bytes, name: str, ev: dict) -> bytes:
        """A tunnel to a name carries TLS for that name: the ClientHello's server name must be
        the CONNECT target's (no reaching another site behind an allowed one's address). What
        the client sent first is returned, to be sent on. Other protocols pass as they are (one
        where the server speaks first at once)."""
        if allowlist.ip_literal(name) is not None:
            return rest
        while len(rest) < 5 or (rest[0] == 0x16 and len(rest) < 5 + int.from_bytes(rest[3:5], "big")
                                and len(rest) < MAX_HEAD):
            ready, _, _ = select.select([conn, upstream], [], [], self.head_timeout)
            if not ready or upstream in ready:
                return rest  # the server speaks first, or the client says nothing
            data = conn.recv(CHUNK)
            if not data:
                break
            rest += data
        sni = client_hello_sni(rest)
        if sni and sni.lower().rstrip(".") != name:
            ev["replied"] = True  # inside the tunnel: no HTTP answer, the connection is closed
            raise Refused(f"runner egress: TLS for {sni[:100]!r} inside a tunnel to {name} (SNI mismatch)")
        return rest

    def _read_body(self, conn, headers, rest: bytes) -> bytes:
        """The body read whole when its Content-Length is at most MAX_BODY_SCAN (so it is checked
        before anything is sent on); else what came with the head (the rest is scanned as it
        passes)."""
        lengths = [v for k, v in headers if k.lower() == "content-length"]
        if len(lengths) != 1 or any(k.lower() in ("transfer-encoding", "expect") for k, _ in headers):
            return rest  # (a client that expects 100-continue sends its body only after the server's word)
        try:
            n = int(lengths[0])
        except ValueError:
            raise ValueError("bad Content-Length") from None
        while len(rest) < min(n, MAX_BODY_SCAN):
            data = conn.recv(CHUNK)
            if not data:
                break
            rest += data
        return rest

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
        # No control character anywhere but the CRLFs that end lines (and a tab in a value): a
        # bare LF or CR is a line end to some servers and not to this parser, so a header could
        # hide a second Host (or a request line a forged log line) from what the proxy checks.
        if _CONTROL.search(head.replace("\r\n", "")):
            raise ValueError("a control character (bare CR, LF, NUL, ...) in the request head")
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if (len(parts) != 3 or not parts[2].startswith("HTTP/") or not _TOKEN.fullmatch(parts[0])
                or "\t" in lines[0]):
            raise ValueError("malformed request line")
        headers = []
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep or not _TOKEN.fullmatch(k):
                raise ValueError("malformed header line")
            headers.append((k, v.strip(" \t")))
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

    def _relay(self, a, b, ev=None, scan=None, masker=None) -> None:
        """Copy both ways with fixed-size buffers until one side closes or both idle too long;
        `a` is the sandbox's side: what it sends is scanned for placeholders, what it receives is
        masked of real values."""
        a.settimeout(self.idle)
        b.settimeout(self.idle)
        for s in (a, b):  # a relay passes each piece on at once: no Nagle wait for the peer's delayed ACK
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peers = {a: b, b: a}
        open_ = {a, b}
        ev = ev if ev is not None else {"bytes_up": 0, "bytes_down": 0}
        while open_:
            ready = [s for s in open_ if isinstance(s, ssl.SSLSocket) and s.pending()]
            if not ready:
                ready, _, _ = select.select(list(open_), [], [], self.idle)
            if not ready:
                return  # idle
            for s in ready:
                try:
                    data = s.recv(CHUNK)
                except ssl.SSLWantReadError:
                    continue
                except OSError:
                    return
                if s is a:
                    if scan is not None and data:
                        try:
                            scan.check(data)
                        except Exfiltration:
                            ev["replied"] = True
                            raise
                    ev["bytes_up"] += len(data)
                else:
                    ev["bytes_down"] += len(data)
                    if masker is not None:
                        out = masker.feed(data)  # at the end (b""): what was held back
                        if masker.masked:
                            ev["masked"] = masker.masked
                        if out:
                            a.sendall(out)
                        if data:
                            continue
                if not data:
                    open_.discard(s)
                    try:
                        if isinstance(peers[s], ssl.SSLSocket):
                            pass  # a TLS socket cannot half-close; the loop ends when the other side does
                        else:
                            peers[s].shutdown(socket.SHUT_WR)
                    except OSError:
                        return
                    if s is b:
                        return  # the answer is complete (requests carry Connection: close)
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
    if cfg.get("control") == "stdin":  # secret values come this way, never on the command line
        line = sys.stdin.readline()
        if not line:
            sys.exit("runner egress: no configuration on stdin")
        proxy = Proxy({**cfg, **json.loads(line)})
        threading.Thread(target=_control, args=(proxy, cfg), name="runner-egress-control", daemon=True).start()
    else:
        proxy = Proxy(cfg)
    proxy.serve()


def _control(proxy, base: dict) -> None:
    """Each later line on stdin replaces the allowlist and the brokering (for new connections)."""
    for line in sys.stdin:
        try:
            proxy.reconfigure({**base, **json.loads(line)})
        except (ValueError, KeyError, TypeError) as e:
            proxy.log("bad configuration line ignored:", type(e).__name__, str(e)[:200])


if __name__ == "__main__":
    main(sys.argv)
