"""`runner exec -p`: a port of a sandbox without egress answered from the host.

Docker publishes no port of a container on an `--internal` network, and a container on a normal
bridge can reach anywhere. So a sandbox with published ports and no egress (network none, the
default) is put on an internal bridge network of its own, closed off from the host as the
allowlist mode's inside network is (egress.Firewall: the host drops what the bridge sends it,
and nothing is forwarded into or out of it), but for the answers to connections the host opened
(conntrack ESTABLISHED). runner itself listens on each HOSTPORT (127.0.0.1 unless an address is
given) and relays every connection to the sandbox's address on the bridge: a userspace proxy, as
docker's own docker-proxy for 127.0.0.1. The network and its rules carry the allowlist mode's
names and labels (runner-egress-<session>-in, role egress-network, comment runner-egress:<session>)
so `runner gc` removes what a killed run left.

With `--network bridge` the engine's own port bindings are used instead (egress is then open,
as asked), bound to 127.0.0.1 unless an address is given.
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
from typing import NamedTuple

from ..errors import ExecutorError
from . import labels as L
from .wire import Engine, EngineRefused

_SPEC = re.compile(r"^(?:(?P<ip>\[[0-9a-fA-F:.]+\]|[0-9.]+):)?(?P<host>\d{1,5}):(?P<port>\d{1,5})(?:/(?P<proto>\w+))?$")


class Port(NamedTuple):
    ip: str
    host_port: int
    port: int


def parse_publish(spec: str) -> Port:
    """'[IP:]HOSTPORT:CONTAINERPORT[/tcp]' -> Port; ValueError otherwise (tcp only)."""
    m = _SPEC.match(spec)
    if not m:
        raise ValueError(f"bad --publish {spec!r}: use [IP:]HOSTPORT:CONTAINERPORT[/tcp]")
    if (m["proto"] or "tcp") != "tcp":
        raise ValueError(f"bad --publish {spec!r}: only tcp ports can be published")
    ip = (m["ip"] or "127.0.0.1").strip("[]")
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"bad --publish {spec!r}: {ip} is no IP address") from None
    host, port = int(m["host"]), int(m["port"])
    if not (0 < port < 65536 and 0 <= host < 65536):
        raise ValueError(f"bad --publish {spec!r}: ports are 1-65535 (HOSTPORT 0 picks a free one)")
    return Port(ip, host, port)


class Relay:
    """The network, firewall and listeners of one sandbox's published ports (network none).

        with Relay(engine, session, ttl, ports) as r:   # listeners bound, network and rules made
            cfg.network = r.network
            ... start the container; r.connect(cid) ...
    """

    def __init__(self, engine: Engine, session: str, ttl: float, ports: list[Port]) -> None:
        from .egress import Firewall, network_names

        self.engine = engine
        self.session = session
        self.ttl = ttl
        self.ports = ports
        self.network = network_names(session)[0]
        self.firewall = Firewall(session)
        self.listeners: list[socket.socket] = []
        self.net_id: str | None = None
        self.target: str | None = None
        self.closed = threading.Event()

    def __enter__(self) -> "Relay":
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self) -> None:
        from .egress import EgressUnavailable

        for p in self.ports:  # first: a port in use fails before anything is made
            family = socket.AF_INET6 if ":" in p.ip else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((p.ip, p.host_port))
            except OSError as e:
                s.close()
                raise ExecutorError(f"--publish {p.ip}:{p.host_port}: cannot listen there ({e.strerror})") from None
            s.listen(64)
            self.listeners.append(s)
        self.firewall.check()
        labels = L.make_labels(self.session, self.ttl, role="egress-network")
        self.net_id = self.engine.json("POST", "/networks/create", {
            "Name": self.network, "Driver": "bridge", "Internal": True, "Labels": labels, "CheckDuplicate": True})["Id"]
        info = self.engine.json("GET", f"/networks/{self.net_id}")
        bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name") or f"br-{self.net_id[:12]}"
        if not os.path.exists(f"/sys/class/net/{bridge}"):
            raise EgressUnavailable(f"the bridge {bridge} of {self.network} is not on this host: --publish without "
                                    "egress needs a local engine whose bridges it can firewall")
        self.firewall.install_closed(bridge)

    def connect(self, cid: str) -> None:
        """The container runs: relay every connection to its address on the network."""
        nets = (self.engine.json("GET", f"/containers/{cid}/json").get("NetworkSettings") or {}).get("Networks") or {}
        self.target = (nets.get(self.network) or {}).get("IPAddress") or None
        if not self.target:
            raise ExecutorError(f"the sandbox got no address on {self.network}: cannot relay its published ports")
        for p, s in zip(self.ports, self.listeners, strict=True):
            threading.Thread(target=self._accept, args=(s, p.port), name="runner-publish", daemon=True).start()

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._pipe, args=(conn, port), name="runner-publish-conn", daemon=True).start()

    def _pipe(self, conn: socket.socket, port: int) -> None:
        try:
            up = socket.create_connection((self.target, port), timeout=10)
        except OSError:
            conn.close()
            return
        up.settimeout(None)

        def copy(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=copy, args=(up, conn), daemon=True)
        t.start()
        copy(conn, up)
        t.join()
        conn.close()
        up.close()

    def close(self) -> None:
        """Stop listening; remove the network (the container is gone by now) and then its rules.
        What cannot be removed now is left, labelled, for `runner gc`."""
        self.closed.set()
        for s in self.listeners:
            s.close()
        self.listeners = []
        if self.net_id is not None:
            try:
                self.engine.json("DELETE", f"/networks/{self.net_id}")
                self.net_id = None
            except (EngineRefused, OSError) as e:
                if getattr(e, "status", None) == 404:
                    self.net_id = None
        if self.net_id is None:
            self.firewall.remove()
