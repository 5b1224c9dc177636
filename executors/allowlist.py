"""The network allowlist's grammar: one parser for the policy, the in-sandbox agent and the proxy.

STANDARD LIBRARY ONLY, Python 3.9+: the in-sandbox agent gets this file in its bundle
(runner/controller/bundle.py) and the egress proxy container gets its source before the proxy's
(executors/docker/egress.py), so what `runner policy check` accepts is exactly what a run does.

An entry is HOST or HOST:PORT, where HOST is

    a host name        api.example.org      (letters, digits, '-'; case and a final '.' ignored)
    a wildcard         *.example.org        any name under example.org, not example.org itself
    an IPv4 address    93.184.216.34        or a network: 10.0.0.0/24
    an IPv6 address    [2001:db8::1]        or a network: [2001:db8::/32]; brackets are needed
                                            with a port, optional without one

and PORT is 1..65535; without one the entry means ports 80 and 443. A name or wildcard entry
never covers an IP literal, and an address or network entry never covers a name: the proxy
resolves names itself and reaches a private, loopback or link-local address only when an
address or network entry lists it.
"""
from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple, Union

DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class Entry(NamedTuple):
    kind: str  # "name" | "wildcard" | "net"
    value: Union[str, ipaddress.IPv4Network, ipaddress.IPv6Network]  # a wildcard keeps the suffix: "example.org"
    ports: tuple  # of int

    def __str__(self) -> str:
        """The canonical spelling (what the policy stores and shows)."""
        if self.kind == "net":
            net = self.value
            host = str(net.network_address) if net.num_addresses == 1 else str(net)
            host = f"[{host}]" if net.version == 6 and self.ports != DEFAULT_PORTS else host
        else:
            host = ("*." if self.kind == "wildcard" else "") + self.value
        return host if self.ports == DEFAULT_PORTS else f"{host}:{self.ports[0]}"


def _port(text: str) -> int:
    if not text.isdigit() or not text.isascii() or not 0 < int(text) < 65536:
        raise ValueError("the port must be a number from 1 to 65535")
    return int(text)


def _split(entry: str) -> tuple:
    """'host:port', '[v6]:port', '[v6]', bare 'v6', 'host' -> (host, ports, bracketed)."""
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep:
            raise ValueError("'[' without its ']'")
        if not rest:
            return host, DEFAULT_PORTS, True
        if not rest.startswith(":"):
            raise ValueError("after ']' only ':PORT' may follow")
        return host, (_port(rest[1:]),), True
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, (_port(port),), False
    return entry, DEFAULT_PORTS, False  # a name, or a bare IPv6 address or network (no port)


def _name(host: str) -> str:
    name = host.lower()
    name = name[:-1] if name.endswith(".") else name
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(x) for x in labels):
        raise ValueError(f"{host!r} is not a host name, IP address or network (a name is letters, "
                         "digits and '-' in dot-separated labels; a wildcard is written *.example.org)")
    if labels[-1].isdigit():
        raise ValueError(f"{host!r} is neither an IP address nor a host name (a name's last label "
                         "is not all digits)")
    return name


def parse_entry(entry: object) -> Entry:
    """One entry -> Entry. Raises ValueError saying what is wrong with it (not repeating it)."""
    if not isinstance(entry, str):
        raise ValueError(f"{entry!r} is not a string (quote it in YAML)")
    text = entry.strip()
    if not text:
        raise ValueError("an empty entry")
    host, ports, bracketed = _split(text)
    if not host:
        raise ValueError("it names no host")
    try:
        net = ipaddress.ip_network(host, strict=False)
    except ValueError:
        net = None
    if net is not None:
        if bracketed and net.version != 6:
            raise ValueError("brackets are for IPv6 addresses only")
        if net.version == 6 and net.prefixlen == 128 and net.network_address.ipv4_mapped is not None:
            net = ipaddress.ip_network(net.network_address.ipv4_mapped)  # ::ffff:a.b.c.d is a.b.c.d
        return Entry("net", net, ports)
    if "/" in host:
        raise ValueError(f"{host!r} is not an IP network (ADDRESS/PREFIX)")
    if bracketed:
        raise ValueError(f"{host!r} in brackets is not an IPv6 address or network")
    if host.startswith("*."):
        suffix = _name(host[2:])
        if "." not in suffix:
            raise ValueError("a wildcard needs at least two labels after '*.' (e.g. *.example.org), "
                             "not a whole top-level domain")
        return Entry("wildcard", suffix, ports)
    if host == "*":
        raise ValueError("'*' alone would allow every host: list the host names, or *.domain")
    if "*" in host:
        raise ValueError("'*' is allowed only as the whole first label (*.example.org)")
    return Entry("name", _name(host), ports)


def parse(entries) -> list:
    """A list of entries -> [Entry]. Raises ValueError naming the first bad entry."""
    if isinstance(entries, (str, bytes)):
        raise ValueError("the allowlist is a list of entries, not one string")
    out = []
    for e in entries:
        try:
            out.append(parse_entry(e))
        except ValueError as why:
            raise ValueError(f"bad allow entry {e!r}: {why}") from None
    return out


def canonical(entry: object) -> str:
    """The canonical spelling of one entry (ValueError naming it when it is not one)."""
    try:
        return str(parse_entry(entry))
    except ValueError as why:
        raise ValueError(f"{entry!r}: {why}") from None


def _unmap(addr):
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def address_allowed(rules, addr, port: int) -> bool:
    """An address (ipaddress object) at port is covered by an address or network entry."""
    addr = _unmap(addr)
    return any(r.kind == "net" and port in r.ports and addr.version == r.value.version and addr in r.value
               for r in rules)


def name_allowed(rules, name: str, port: int) -> bool:
    """A host name at port is covered by a name or wildcard entry (never an IP literal)."""
    name = name.lower()
    name = name[:-1] if name.endswith(".") else name
    for r in rules:
        if port not in r.ports:
            continue
        if r.kind == "name" and r.value == name:
            return True
        if r.kind == "wildcard" and name.endswith("." + r.value):
            return True
    return False


def ip_literal(host: str):
    """The address a host is written as ('[v6]' too), or None for a name."""
    try:
        return ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return None


def allowed(rules, host: str, port: int) -> bool:
    """host:port is listed: an IP literal by an address or network entry, a name by a name or
    wildcard entry."""
    addr = ip_literal(host)
    if addr is not None:
        return address_allowed(rules, addr, port)
    return name_allowed(rules, host, port)
