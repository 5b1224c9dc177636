"""Network allowlist mode of the docker backend, against the real engine.

Where traffic goes in these tests: only to loopback, to containers the tests start, and to the
host's own bridge addresses. Addresses that must be refused (169.254.169.254, private ranges)
are only ever *named*; a guard rule on the host drops and counts anything the proxy would send
there, and the count must stay 0 (so even a broken defence sends nothing off this machine).
"""
from __future__ import annotations

import contextlib
import http.server
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from executors.docker import DockerExecutor
from executors.docker import labels as L
from executors.docker.egress import COMMENT_PREFIX, Egress, EgressUnavailable, network_names, reap_orphans, run_tables
from executors.docker.egress_proxy import Refused, decide, parse_allow
from executors.errors import InvalidConfig
from executors.models import Limits

IMAGE = "runner/base:latest"
TEST_LABELS = {"runner.test": "egress"}
GUARD_COMMENT = "runner-egress-test"


# -- running the firewall tools --------------------------------------------------------------

def test_a_finished_firewall_command_counts_even_if_a_child_keeps_its_output_open():
    # CI once saw `iptables -I` exit 0 and still "time out": only the process itself is waited for.
    res = run_tables(["sh", "-c", "sleep 20 & echo $!; echo warn >&2"], timeout=60)
    child = int(res.stdout)
    try:
        os.kill(child, 0)  # still running, holding the output open: run_tables did not wait for it
        assert (res.returncode, res.stderr) == (0, "warn\n")
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_hung_firewall_command_is_killed_and_said_clearly():
    with pytest.raises(EgressUnavailable, match="did not finish within 0.5 s"):
        run_tables(["sleep", "30"], timeout=0.5)


# -- the allowlist logic, without Docker ------------------------------------------------------

def fake_resolver(table):
    def resolve(name, port):
        if name not in table:
            raise OSError(f"{name} does not resolve")
        return [ipaddress.ip_address(a) for a in table[name]]
    return resolve


DNS = fake_resolver({
    "api.example.com": ["93.184.216.34"],
    "meta.example.com": ["169.254.169.254"],
    "mixed.example.com": ["93.184.216.34", "10.0.0.5"],
    "corp.example.com": ["10.0.0.9"],
    "v6.example.com": ["2606:2800:220:1::1"],
    "mapped.example.com": ["::ffff:127.0.0.1"],
    "cgnat.example.com": ["100.64.1.1"],
    "ula.example.com": ["fd00::1"],
})


def reason(allow, host, port):
    with pytest.raises(Refused) as e:
        decide(parse_allow(allow), host, port, DNS)
    return str(e.value)


def test_hostname_entries_match_exactly_and_case_insensitively():
    rules = parse_allow(["API.Example.com:443"])
    assert decide(rules, "api.example.COM", 443, DNS) == [ipaddress.ip_address("93.184.216.34")]
    assert decide(rules, "api.example.com.", 443, DNS)
    assert "not in the allowlist" in reason(["api.example.com:443"], "api.example.com", 80)
    assert "not in the allowlist" in reason(["api.example.com:443"], "x.api.example.com", 443)
    assert "not in the allowlist" in reason(["api.example.com:443"], "example.com", 443)


def test_an_entry_without_port_means_80_and_443():
    rules = parse_allow(["api.example.com"])
    assert decide(rules, "api.example.com", 80, DNS) and decide(rules, "api.example.com", 443, DNS)
    assert "not in the allowlist" in reason(["api.example.com"], "api.example.com", 8080)


@pytest.mark.parametrize("name,what", [
    ("meta.example.com", "link-local"), ("corp.example.com", "private"), ("mixed.example.com", "private"),
    ("mapped.example.com", "loopback"), ("cgnat.example.com", "CGNAT"), ("ula.example.com", "private"),
])
def test_a_hostname_entry_never_unlocks_an_inside_address(name, what):
    text = reason([f"{name}:443"], name, 443)
    assert text.startswith(f"runner egress: {name}:443 resolves to ") and what in text


@pytest.mark.parametrize("host,what", [
    ("169.254.169.254", "link-local"), ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("192.168.1.1", "private"), ("100.64.0.1", "CGNAT"), ("0.0.0.0", "unspecified"), ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"), ("::1", "loopback"), ("fe80::1", "link-local"), ("fd12::1", "private"),
    ("::ffff:169.254.169.254", "link-local"),
])
def test_inside_ip_literals_are_refused_with_their_kind(host, what):
    text = reason(["api.example.com"], host, 80)
    assert f"is {'an' if what[0] in 'aeiou' else 'a'} {what}" in text and text.endswith("address and not listed")


def test_ip_and_cidr_entries_unlock_the_addresses_they_cover():
    rules = parse_allow(["10.0.0.0/24:8080", "169.254.169.254:80", "corp.example.com:443", "10.0.0.9:443"])
    assert decide(rules, "10.0.0.77", 8080, DNS) == [ipaddress.ip_address("10.0.0.77")]
    assert decide(rules, "169.254.169.254", 80, DNS)
    assert decide(rules, "corp.example.com", 443, DNS) == [ipaddress.ip_address("10.0.0.9")]
    assert "private address and not listed" in reason(["10.0.0.0/24:8080"], "10.0.0.77", 8081)
    assert "private" in reason(["10.0.0.0/24:8080"], "10.0.1.1", 8080)
    assert decide(parse_allow(["[2606:2800:220:1::1]:443", "v6.example.com:443"]), "v6.example.com", 443, DNS)


def test_public_ip_literal_needs_an_ip_entry():
    assert "not in the allowlist" in reason(["api.example.com:443"], "93.184.216.34", 443)
    assert decide(parse_allow(["93.184.216.34:443"]), "93.184.216.34", 443, DNS)


@pytest.mark.parametrize("entry", ["", "host:", "host:0", "host:70000", "host:x", "*.com:443", "10.0.0.0/33:80",
                                   "a b:80", "[::1", "user@host:80"])
def test_bad_entries_are_refused_by_name(entry):
    with pytest.raises(ValueError, match="allow entry"):
        parse_allow([entry])


def test_egress_validates_its_allowlist_before_touching_the_engine():
    with pytest.raises(InvalidConfig, match="bad allow entry"):
        Egress(None, "s1", allow=["a.*.example.com:443"])
    with pytest.raises(InvalidConfig, match="bad session"):
        Egress(None, "a/b", allow=[])


# -- helpers against the engine ----------------------------------------------------------------

def iptables(*args: str, tool: str = "iptables") -> str:
    return subprocess.run([tool, "-w", "10", *args], check=True, capture_output=True, text=True).stdout


def session_rules(session: str) -> list[str]:
    return [line for tool in ("iptables", "ip6tables") for line in iptables("-S", tool=tool).splitlines()
            if f'"{COMMENT_PREFIX}{session}"' in line or f"{COMMENT_PREFIX}{session} " in line]


@pytest.fixture
def egresses(docker_client, no_leaks):
    """Start Egress objects with fresh sessions; after the test, every one must have left
    nothing behind: no container, no runner-* network, no firewall rule of its session."""
    started: list[Egress] = []

    def make(allow, **kw):
        eg = Egress(docker_client, f"egxt-{uuid.uuid4().hex[:8]}", allow=allow, labels=TEST_LABELS, **kw)
        started.append(eg)
        eg.start()
        return eg

    yield make
    for eg in started:
        eg.stop()
    for eg in started:
        assert session_rules(eg.session) == [], f"firewall rules of {eg.session} left behind"
    # only these sessions' networks: other runs on this machine (a helper's, a parallel worker's)
    # make and remove their own meanwhile
    ours = {name for eg in started for name in (eg.inside_name, eg.outside_name) if eg.own_outside or name == eg.inside_name}
    left = {n.name for n in docker_client.networks.list()} & ours
    assert not left, f"networks left behind: {left}"


@contextlib.contextmanager
def sandbox(eg: Egress, **fields):
    """A sandbox wired the way the Runner wires allowlist mode."""
    cfg = dict(network=eg.sandbox_network, dns=eg.sandbox_dns, env=dict(eg.proxy_env),
               limits=Limits(memory="128m", pids=64), labels=TEST_LABELS)
    cfg.update(fields)
    with DockerExecutor(**cfg) as box:
        yield box


PRELUDE = r'''
import json, os, socket, sys, urllib.request
def raw(host, port, data, timeout=5.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.sendall(data.encode())
    out = b""
    while True:
        try:
            d = s.recv(65536)
        except OSError:
            break
        if not d:
            break
        out += d
    s.close()
    return out.decode(errors="replace")
def tunnel(target, request, timeout=5.0):
    s = socket.create_connection(("egress-proxy", 3128), timeout=timeout)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    s.sendall(request.encode())
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    return head.decode() + out.decode(errors="replace")
def tcp(host, port, timeout=2.0):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return "connected"
    except OSError as e:
        return "failed: %s" % (e,)
def get(url, timeout=5.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return "%d %s" % (r.status, r.read().decode().strip())
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode().strip())
    except OSError as e:
        return "failed: %s" % (e,)
def dns_query(name, timeout=3.0):
    """One A query straight to the embedded resolver: 'rcode=N answers=M' or 'no answer'."""
    import struct
    qid = int.from_bytes(os.urandom(2), "big")
    pkt = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    pkt += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    s.sendto(pkt, ("127.0.0.11", 53))
    try:
        d = s.recv(4096)
    except socket.timeout:
        return "no answer"
    return "rcode=%d answers=%d" % (d[3] & 15, struct.unpack(">H", d[6:8])[0])
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)})
    except OSError as e:
        return "failed: %s" % (e,)
'''


def py(box, code: str) -> str:
    res = box.run(["python3", "-c", PRELUDE + code], timeout=60)
    assert res.exit_code == 0, res.stderr.decode()
    return res.stdout.decode()


def start_container(client, cmd, network: str, **kw):
    """A hardened, labelled helper container the test owns."""
    c = client.containers.create(
        IMAGE, cmd, network=network, user="1000:1000", cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
        read_only=True, tmpfs={"/tmp": "size=8m"}, pids_limit=64, mem_limit="128m", init=True,
        labels=L.make_labels("egress-test", 3600, role="test", extra=TEST_LABELS), **kw)
    c.start()
    return c


@pytest.fixture
def outside(docker_client):
    """A plain bridge network the test owns (the proxy's way out) with `python3 -m http.server`
    in a container on it: (network name, server IP)."""
    name = f"runner-egxtest-{uuid.uuid4().hex[:8]}"
    net = docker_client.networks.create(name, driver="bridge", labels={L.MANAGED: "true", **TEST_LABELS})
    c = None
    try:
        c = start_container(docker_client, ["sh", "-c", "mkdir -p /tmp/www && echo hello-from-allowed > /tmp/www/index.txt"
                                                        " && cd /tmp/www && exec python3 -u -m http.server 8000"], name)
        deadline = time.monotonic() + 20
        while b"Serving HTTP" not in c.logs():
            assert time.monotonic() < deadline, c.logs()
            time.sleep(0.05)
        c.reload()
        yield name, c.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
    finally:
        if c is not None:
            c.remove(force=True)
        net.reload()
        for cid in net.attrs.get("Containers") or {}:  # whatever a failed test left attached
            net.disconnect(cid, force=True)
        net.remove()


def bridge_of(client, network: str) -> str:
    return f"br-{client.networks.get(network).id[:12]}"


def gateway_of(client, network: str) -> str:
    return client.networks.get(network).attrs["IPAM"]["Config"][0]["Gateway"]


@contextlib.contextmanager
def counting_rule(chain: str, spec: list[str], target: list[str] | None = None):
    """A host rule at the top of `chain`, tagged for the test; yields its packet counter."""
    tag = f"{GUARD_COMMENT}:{uuid.uuid4().hex[:8]}"
    full = [*spec, "-m", "comment", "--comment", tag, *(target or [])]
    iptables("-I", chain, "1", *full)

    def packets() -> int:
        for line in iptables("-L", chain, "-v", "-x", "-n").splitlines():
            if tag in line:
                return int(line.split()[0])
        raise AssertionError(f"rule {tag} vanished")

    try:
        yield packets
    finally:
        iptables("-D", chain, *full)


@contextlib.contextmanager
def host_http_server():
    """An HTTP server on the host, on 0.0.0.0 and a free port, bound for the test's duration only."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"host-service"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


# -- through the proxy -----------------------------------------------------------------------------

def test_allowed_ip_literal_is_reached_by_get_and_by_connect(docker_client, outside, egresses):
    net, ip = outside
    eg = egresses([f"{ip}:8000"], outside_network=net)
    with sandbox(eg) as box:
        out = py(box, f"print(get('http://{ip}:8000/index.txt'))\n"
                      f"print(json.dumps(tunnel('{ip}:8000', 'GET /index.txt HTTP/1.0\\r\\n\\r\\n')))")
    lines = out.splitlines()
    assert lines[0] == "200 hello-from-allowed"  # urllib took HTTP_PROXY from proxy_env
    tunnelled = json.loads(lines[1])
    assert tunnelled.startswith("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200 OK")
    assert tunnelled.endswith("hello-from-allowed\n")
    assert eg.logs().count(f"-> {ip}:8000 via {ip}") == 2


def test_a_hostname_entry_reaches_a_public_looking_name_only_via_an_ip_entry_when_inside(docker_client, outside, egresses):
    """web.test resolves (the proxy's /etc/hosts) to the server's private address: the hostname
    entry alone is refused; a CIDR entry covering the address unlocks it."""
    net, ip = outside
    hosts = {"web.test": ip}
    eg = egresses(["web.test:8000"], outside_network=net, extra_hosts=hosts)
    with sandbox(eg) as box:
        out = py(box, "print(get('http://WEB.test:8000/index.txt'))")
    assert out.strip() == f"403 runner egress: WEB.test:8000 resolves to {ip}, a private address; only an IP or CIDR entry can allow that"
    eg.stop()
    subnet = str(ipaddress.ip_network(f"{ip}/16", strict=False))
    eg = egresses(["web.test:8000", f"{subnet}:8000"], outside_network=net, extra_hosts=hosts)
    with sandbox(eg) as box:
        assert py(box, "print(get('http://web.test:8000/index.txt'))").strip() == "200 hello-from-allowed"


def test_refusals_say_why_and_happen_before_any_connection(docker_client, outside, egresses):
    net, ip = outside
    hosts = {"metadata.test": "169.254.169.254", "inside.test": "192.168.77.7"}
    eg = egresses([f"{ip}:8000", "metadata.test:80", "inside.test:443"], outside_network=net, extra_hosts=hosts)
    out_bridge = bridge_of(docker_client, net)
    # Guards: whatever the proxy might send toward these addresses is dropped on this host and
    # counted; the counts must stay 0 (refused before any connection, nothing leaves the machine).
    with counting_rule("DOCKER-USER", ["-i", out_bridge, "-d", "169.254.169.254"], ["-j", "DROP"]) as meta, \
            counting_rule("DOCKER-USER", ["-i", out_bridge, "-d", "192.168.77.7"], ["-j", "DROP"]) as inside, \
            counting_rule("DOCKER-USER", ["-i", out_bridge, "-d", "10.0.0.0/8"], ["-j", "DROP"]) as ten, \
            sandbox(eg) as box:
        out = py(box, "\n".join([
            f"print(get('http://{ip}:8001/'))",                              # listed host, other port
            "print(get('http://169.254.169.254/latest/meta-data/'))",       # the metadata address
            "print(get('http://metadata.test/latest/meta-data/'))",         # listed name -> metadata address
            "print(raw('egress-proxy', 3128, 'CONNECT inside.test:443 HTTP/1.1\\r\\n\\r\\n').splitlines()[-1])",
            "print(raw('egress-proxy', 3128, 'CONNECT 10.1.2.3:443 HTTP/1.1\\r\\n\\r\\n').splitlines()[-1])",
            "print(get('http://nothere.test/'))",
            "print(raw('egress-proxy', 3128, 'GET https://x.test/ HTTP/1.1\\r\\n\\r\\n').splitlines()[0])",
        ]))
        counts = meta(), inside(), ten()
    assert out.splitlines() == [
        f"403 runner egress: {ip}:8001 is a private address and not listed",
        "403 runner egress: 169.254.169.254:80 is a link-local address and not listed",
        "403 runner egress: metadata.test:80 resolves to 169.254.169.254, a link-local address; only an IP or CIDR entry can allow that",
        "runner egress: inside.test:443 resolves to 192.168.77.7, a private address; only an IP or CIDR entry can allow that",
        "runner egress: 10.1.2.3:443 is a private address and not listed",
        "403 runner egress: nothere.test:80 is not in the allowlist",
        "HTTP/1.1 400 Bad Request",
    ]
    assert counts == (0, 0, 0)
    assert not re.search(r"^\S+ (CONNECT|GET) ", eg.logs(), re.M), eg.logs()  # nothing was let through
    assert eg.logs().count("REFUSED") == 7


def test_the_proxy_is_bounded(docker_client, outside, egresses):
    net, ip = outside
    eg = egresses([f"{ip}:8000"], outside_network=net, max_conns=2)
    with sandbox(eg) as box:
        out = py(box, "\n".join([
            "held = [socket.create_connection(('egress-proxy', 3128), timeout=5) for _ in range(2)]",
            "import time; time.sleep(0.5)",
            "print(raw('egress-proxy', 3128, '').splitlines()[-1])",
            "[h.close() for h in held]; time.sleep(0.5)",
            "print(raw('egress-proxy', 3128, 'GET http://%s:8000/ HTTP/1.1\\r\\nX: ' + 'a' * 20000 + '\\r\\n\\r\\n').splitlines()[0])" % ip,
        ]))
    assert out.splitlines() == ["runner egress: too many connections (limit 2)", "HTTP/1.1 431 Request Header Fields Too Large"]


# -- no way around the proxy -------------------------------------------------------------------

def test_no_direct_route_from_the_sandbox(docker_client, outside, egresses):
    net, ip = outside
    eg = egresses([f"{ip}:8000"], outside_network=net)
    with sandbox(eg) as box:
        out = py(box, f"print(tcp('{ip}', 8000)); print(tcp('{eg.proxy_ip}', 3128))\n"
                      "direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
                      "try:\n"
                      f"    print(direct.open('http://{ip}:8000/index.txt', timeout=2).status)\n"
                      "except OSError as e:\n"
                      "    print('failed: %s' % e)")
    direct, proxy, no_proxy = out.splitlines()
    assert direct.startswith("failed"), direct
    assert proxy == "connected"
    assert no_proxy.startswith("failed"), no_proxy


def test_the_host_is_closed_off(docker_client, outside, egresses):
    net, ip = outside
    eg = egresses([f"{ip}:8000"], outside_network=net)
    gw = gateway_of(docker_client, eg.sandbox_network)
    ctl_name = f"runner-egxtest-ctl-{uuid.uuid4().hex[:8]}"
    ctl_net = docker_client.networks.create(ctl_name, driver="bridge", internal=True, labels={L.MANAGED: "true", **TEST_LABELS})
    try:
        ctl_gw = gateway_of(docker_client, ctl_name)
        with host_http_server() as port:
            # Control: a plain --internal network without our rules reaches the host service.
            c = start_container(docker_client, ["python3", "-c", PRELUDE + f"print(raw('{ctl_gw}', {port}, "
                                                "'GET / HTTP/1.0\\r\\n\\r\\n').splitlines()[0])"], ctl_name)
            try:
                assert c.wait(timeout=30)["StatusCode"] == 0, c.logs()
                assert c.logs().decode().strip() == "HTTP/1.0 200 OK"
            finally:
                c.remove(force=True)
            # Our rule is in place, and the sandbox reaches nothing on the host: not through its
            # own gateway, not through another bridge's address, not through the proxy's port.
            rules = session_rules(eg.session)
            assert f"-A INPUT -i {eg.bridge} -m comment --comment \"{COMMENT_PREFIX}{eg.session}\" -j DROP" in rules
            with sandbox(eg) as box:
                out = py(box, f"print(tcp('{gw}', {port})); print(tcp('{gateway_of(docker_client, net)}', {port})); "
                              f"print(tcp('{gw}', 22)); print(get('http://{gw}:{port}/'))")
            lines = out.splitlines()
            assert all(x.startswith("failed") for x in lines[:3]), lines
            # ... and the proxy refuses the host's address, which is not listed.
            assert lines[3] == f"403 runner egress: {gw}:{port} is a private address and not listed"
    finally:
        ctl_net.remove()


# -- DNS -------------------------------------------------------------------------------------------

@contextlib.contextmanager
def loopback_dns_listener():
    """UDP+TCP listeners on the host's 127.0.0.1:53, counting what arrives (None if taken)."""
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 53))
        t = socket.socket()
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind(("127.0.0.1", 53))
        t.listen()
    except OSError:
        yield None
        return
    got = []
    stop = threading.Event()

    def loop():
        import select

        while not stop.is_set():
            r, _, _ = select.select([u, t], [], [], 0.1)
            for s in r:
                if s is u:
                    got.append(u.recvfrom(4096))
                else:
                    got.append(t.accept())
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        yield got
    finally:
        stop.set()
        th.join()
        u.close()
        t.close()


def test_dns_from_the_sandbox_is_a_dead_end_but_the_proxy_alias_resolves(docker_client, outside, egresses):
    net, ip = outside
    eg = egresses([f"{ip}:8000"], outside_network=net)
    gw = gateway_of(docker_client, eg.sandbox_network)
    probe = f"leak-{uuid.uuid4().hex[:8]}.invalid"
    br = eg.bridge
    with counting_rule("INPUT", ["-i", br, "-p", "udp", "--dport", "53"]) as in_udp, \
            counting_rule("INPUT", ["-i", br, "-p", "tcp", "--dport", "53"]) as in_tcp, \
            counting_rule("DOCKER-USER", ["-i", br, "-p", "udp", "--dport", "53"]) as fwd_udp, \
            counting_rule("DOCKER-USER", ["-i", br, "-p", "tcp", "--dport", "53"]) as fwd_tcp, \
            loopback_dns_listener() as host_lo:
        with sandbox(eg) as box:
            assert box.run(["cat", "/etc/resolv.conf"]).stdout.decode().split("\n")[0] == "nameserver 127.0.0.11"
            out = py(box, f"print(json.dumps([resolve('egress-proxy'), dns_query('{probe}'), dns_query('example.com')]))")
        alias, leak, outside_name = json.loads(out)
        assert alias == [eg.proxy_ip]
        assert leak == "no answer" and outside_name == "no answer"
        assert (in_udp(), in_tcp(), fwd_udp(), fwd_tcp()) == (0, 0, 0, 0), "a DNS query left the sandbox's namespace"
        if host_lo is not None:
            assert host_lo == [], "the engine forwarded the sandbox's query to the host's loopback"
        # Control: the same embedded resolver, given the host's bridge address as upstream,
        # does forward an unknown name out of the sandbox's namespace even on this internal
        # network; only the firewall (INPUT drop) stops it. Hence the dead-end upstream.
        with sandbox(eg, dns=[gw]) as box:
            out = py(box, f"print(json.dumps(dns_query('{probe}')))")
        assert json.loads(out) == "no answer"
        assert in_udp() + in_tcp() > 0
        assert fwd_udp() + fwd_tcp() == 0


# -- lifecycle -------------------------------------------------------------------------------------

def test_two_sessions_do_not_see_each_others_proxy_and_stop_removes_everything(docker_client, egresses):
    a = egresses([])
    b = egresses([])
    assert a.sandbox_network != b.sandbox_network and a.outside_network != b.outside_network
    b_out_ip = docker_client.containers.get(f"runner-egress-{b.session}").attrs["NetworkSettings"]["Networks"][b.outside_network]["IPAddress"]
    with sandbox(a) as box:
        out = py(box, f"print(json.dumps([resolve('egress-proxy'), tcp('{b.proxy_ip}', 3128), tcp('{b_out_ip}', 3128)]))")
    alias, b_in, b_out = json.loads(out)
    assert alias == [a.proxy_ip]
    assert b_in.startswith("failed") and b_out.startswith("failed")
    # Labels: `runner gc` finds the proxy; the networks carry the same labels.
    proxy = docker_client.containers.get(f"runner-egress-{a.session}")
    assert proxy.labels[L.MANAGED] == "true" and proxy.labels[L.SESSION] == a.session
    assert proxy.labels[L.ROLE] == "egress-proxy"
    hc = proxy.attrs["HostConfig"]
    assert hc["CapDrop"] == ["ALL"] and hc["ReadonlyRootfs"] and "no-new-privileges:true" in hc["SecurityOpt"]
    assert hc["PidsLimit"] == 64 and hc["Memory"] == 64 * 2**20 and proxy.attrs["Config"]["User"] == "65534:65534"
    assert docker_client.networks.get(a.sandbox_network).attrs["Internal"] is True
    assert docker_client.networks.get(a.sandbox_network).attrs["Labels"][L.SESSION] == a.session
    for eg in (a, b):
        eg.stop()
        assert session_rules(eg.session) == []
        for name in network_names(eg.session):
            assert not docker_client.networks.list(names=[name])
        assert not docker_client.containers.list(all=True, filters={"label": f"{L.SESSION}={eg.session}"})
    a.stop()  # idempotent


def test_a_failed_start_leaves_nothing_behind(docker_client, egresses, monkeypatch):
    def boom(self):
        assert session_rules(self.session) and self.proxy is not None  # everything exists by now
        raise RuntimeError("proxy never came up")

    monkeypatch.setattr(Egress, "_wait_ready", boom)
    with pytest.raises(RuntimeError, match="never came up"):
        egresses([])
    # (the fixture checks that no container, network or rule remains)


def test_without_iptables_allowlist_mode_refuses_to_start(docker_client, egresses, monkeypatch):
    import executors.docker.egress as E

    monkeypatch.setattr(E.shutil, "which", lambda name: None)
    with pytest.raises(EgressUnavailable, match="needs iptables"):
        egresses([])


def test_reap_orphans_tears_down_an_egress_whose_owner_is_gone(docker_client, egresses):
    eg = egresses([])
    assert eg.session not in [s for s, _ in reap_orphans(docker_client, dry_run=True)]  # its owner (we) lives
    dead = Egress(docker_client, f"egxt-{uuid.uuid4().hex[:8]}", allow=[], labels=TEST_LABELS, ttl=0.001)
    dead.start()
    try:
        time.sleep(0.05)
        # these two sessions alone: a sweep of every orphan would take another run's (a parallel
        # worker's killed `runner exec -p`, which its own test then looks for)
        found = dict(reap_orphans(docker_client, only={dead.session, eg.session}))
        assert found.get(dead.session) == "expired"
        assert session_rules(dead.session) == []
        assert not docker_client.networks.list(names=[dead.sandbox_network])
        assert not docker_client.containers.list(all=True, filters={"label": f"{L.SESSION}={dead.session}"})
        assert eg.session not in found and session_rules(eg.session)  # the live one is untouched
    finally:
        dead.stop()


def test_the_users_docker_proxies_never_reach_the_egress_proxy(docker_client, no_leaks, tmp_path, monkeypatch):
    """The egress proxy's environment is runner's: not the proxies of ~/.docker/config.json,
    which docker-py would add to every container it creates."""
    from executors.docker.engine import connect

    (tmp_path / "config.json").write_text(json.dumps({"proxies": {"default": {"httpProxy": "http://127.0.0.1:9"}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    client = connect()  # a fresh client, which reads DOCKER_CONFIG
    eg = Egress(client, f"egxt-{uuid.uuid4().hex[:8]}", allow=[], labels=TEST_LABELS)
    try:
        eg.start()
        env = client.api.inspect_container(eg.proxy.id)["Config"]["Env"] or []
    finally:
        eg.stop()
        client.close()
    assert not [e for e in env if "proxy" in e.lower()], env


def test_reap_orphans_spares_an_egress_started_while_it_looks(docker_client, no_leaks):
    """`runner gc` beside a run that starts an egress: the start makes the networks, then the
    firewall rules. A sweep that listed the networks before the start and the rules after it took
    the new session's rules for rules without their network, and tore the live egress down."""
    session = f"egxt-{uuid.uuid4().hex[:8]}"
    started = []

    class StartsOneWhileListed:  # the engine's answer, then the other run's start
        def __init__(self, client):
            self.client = client

        def list(self, *a, **kw):
            nets = self.client.networks.list(*a, **kw)
            if not started:
                eg = Egress(docker_client, session, allow=[], labels=TEST_LABELS)
                started.append(eg)
                eg.start()
            return nets

    class Client:
        networks = StartsOneWhileListed(docker_client)

        def __getattr__(self, name):
            return getattr(docker_client, name)

    try:
        found = dict(reap_orphans(Client(), dry_run=True, only={session}))
        assert started, "the sweep listed no network"
        assert session not in found, found
    finally:
        for eg in started:
            eg.stop()
    assert session_rules(session) == []
    assert not docker_client.networks.list(names=list(network_names(session)))
