"""Network allowlist mode for the docker backend: a sandbox network that reaches only an egress
proxy, which reaches only the allowlist.

    with Egress(client, session, allow=["pypi.org:443"], labels=...) as eg:
        cfg = SandboxConfig(network=eg.sandbox_network, dns=eg.sandbox_dns, env={**env, **eg.proxy_env}, ...)

What `start()` builds (and `stop()` removes, also after a failed start):
- `runner-egress-<session>-in`: an internal bridge network for the sandbox side;
- `runner-egress-<session>-out`: a normal bridge network, the proxy's route out (per session,
  so no other container shares a network with the proxy's outside leg), unless `outside_network`
  names an existing one (e.g. "bridge"), which is then used and left alone;
- the proxy container (hardened, labelled for `runner gc`) on both, alias `egress-proxy` inside,
  running `egress_proxy.py` from the image's own python3;
- host firewall rules, each tagged with the comment `runner-egress:<session>`:
    INPUT        -i BR_IN -j DROP                                  (the sandbox never reaches the host)
    DOCKER-USER  -i BR_IN -o BR_IN -s SUBNET -d PROXY -p tcp --dport 3128 -j RETURN
    DOCKER-USER  -i BR_IN -o BR_IN -s PROXY -d SUBNET -p tcp --sport 3128 -j RETURN
    DOCKER-USER  -i BR_IN -j DROP                                  (nothing else from the sandbox side)
    DOCKER-USER  -o BR_IN -j DROP                                  (nothing else into it)
  at the top of their chains (FORWARD when the engine made no DOCKER-USER chain)
  and the INPUT / FORWARD drops with ip6tables when the host has IPv6. A Docker `--internal`
  network alone still lets a container reach every service on the host's own addresses.

Brokered secrets (`broker=`: name, placeholder, value, hosts): the proxy is told its allowlist,
the secrets' values and a leaf certificate per brokering host over its stdin (never its command
line, which `docker inspect` shows), and again on each `update()` (a live policy change, for new
connections). The session's CA (egress_tls.SessionCA) stays in this process; the sandbox trusts
its certificate through `sandbox_mounts()` (the system bundle and /etc/runner-egress-ca) and
`proxy_env` (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO, CURL_CA_BUNDLE).
Each request the proxy sees becomes an event (`on_event(dict)`), which the controller audits.

Docker's embedded DNS (127.0.0.11) forwards names it does not know to the container's upstream
servers even on an internal network (seen on Docker 20.10: the query left the container's
namespace for the host's resolver and only the bridge's iptables rules stopped it; with a resolver
on the host's loopback the engine would even send it from the host itself). So the sandbox gets
`dns=["127.0.0.1"]` (`sandbox_dns`): its upstream is its own loopback, where nothing listens; the
proxy's alias is still answered by the embedded resolver.
"""
from __future__ import annotations

import inspect
import ipaddress
import json
import os
import shutil
import subprocess
import time

from ..errors import ExecutorError, InvalidConfig
from .. import allowlist
from . import egress_proxy
from . import labels as L
from .config import DEFAULT_IMAGE

PROXY_ALIAS = "egress-proxy"
PROXY_PORT = 3128
LOG_KEEP = 1024 * 1024  # characters of the proxy's log kept in memory (one line per connection)
SANDBOX_DNS = ["127.0.0.1"]
COMMENT_PREFIX = "runner-egress:"
SANDBOX_CA_DIR = "/etc/runner-egress-ca"  # the session CA's certificate and the bundle with it, read-only
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # replaced (read-only) by the bundle with the session CA


class EgressUnavailable(ExecutorError):
    """Allowlist mode cannot be made safe here (no iptables, no bridge, proxy did not start)."""


def network_names(session: str) -> tuple[str, str]:
    return f"runner-egress-{session}-in", f"runner-egress-{session}-out"


def _proxy_source() -> str:
    """The program the proxy container runs: it installs the allowlist grammar as a module, then
    runs the proxy as __main__ (its `from .. import allowlist` falls back to that module). Run
    under another name, it only defines the proxy, in its global `proxy` (a dict)."""
    grammar = inspect.getsource(allowlist)
    return ("import sys, types\n"
            "_m = types.ModuleType('runner_egress_allowlist')\n"
            f"exec(compile({grammar!r}, '<executors/allowlist.py>', 'exec'), _m.__dict__)\n"
            "sys.modules[_m.__name__] = _m\n"
            "proxy = {'__name__': __name__}\n"  # __main__ under -c: the proxy serves
            f"exec(compile({inspect.getsource(egress_proxy)!r}, '<egress_proxy.py>', 'exec'), proxy)\n")


TABLES_TIMEOUT = 60.0


def run_tables(argv: list[str], timeout: float = TABLES_TIMEOUT) -> subprocess.CompletedProcess:
    """Run one iptables command. Its output goes to files, not pipes, and only the process itself
    is waited for: a finished command is never taken for a hung one because something else kept
    a pipe open or the clock jumped (CI once saw `iptables -I` exit 0 and still time out in
    subprocess.run). A command that is really still running at the deadline is killed and
    reported as EgressUnavailable, never as a bare TimeoutExpired."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = proc.poll()  # finished after all (a late wake-up): its answer stands
            if code is None:
                proc.kill()
                proc.wait()
                raise EgressUnavailable(f"`{os.path.basename(argv[0])} {' '.join(argv[1:])}` did not finish within "
                                        f"{timeout:g} s (killed); the host firewall is not answering") from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, code, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))


class Firewall:
    """Host iptables rules of one session, all tagged with one comment so they can be found and
    removed even by another process (`remove_session_rules`)."""

    def __init__(self, session: str) -> None:
        self.comment = COMMENT_PREFIX + session
        self.iptables = shutil.which("iptables")
        self.ip6tables = shutil.which("ip6tables")

    @staticmethod
    def _run(tool: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        res = run_tables([tool, "-w", "10", *args])
        if check and res.returncode != 0:
            raise EgressUnavailable(f"`{os.path.basename(tool)} {' '.join(args)}` failed: {res.stderr.strip()[:300]}")
        return res

    def check(self) -> None:
        if os.geteuid() != 0:
            raise EgressUnavailable("network allowlist mode needs root to install host firewall rules "
                                    "(iptables); refusing to run the sandbox with the host open")
        if not self.iptables:
            raise EgressUnavailable("network allowlist mode needs iptables on the Docker host to close the host "
                                    "off from the sandbox network; install iptables or use network mode none")
        res = self._run(self.iptables, ["-S", "INPUT"], check=False)
        if res.returncode != 0:
            raise EgressUnavailable(f"iptables does not work here ({res.stderr.strip()[:200]}); "
                                    "refusing allowlist mode rather than run with the host open")
        if self._ipv6_on() and not self.ip6tables:
            raise EgressUnavailable("the host has IPv6 but no ip6tables: cannot close the host off the sandbox "
                                    "network; install ip6tables or use network mode none")

    @staticmethod
    def _ipv6_on() -> bool:
        try:
            with open("/proc/sys/net/ipv6/conf/all/disable_ipv6") as f:
                return f.read().strip() == "0"
        except OSError:
            return False

    def _forward_chain(self, tool: str) -> str:
        return "DOCKER-USER" if self._run(tool, ["-S", "DOCKER-USER"], check=False).returncode == 0 else "FORWARD"

    def install(self, bridge: str, subnet: str, proxy_ip: str, port: int) -> None:
        tag = ["-m", "comment", "--comment", self.comment]
        fwd = self._forward_chain(self.iptables)
        rules = [
            ("INPUT", ["-i", bridge, *tag, "-j", "DROP"]),
            (fwd, ["-i", bridge, "-o", bridge, "-s", subnet, "-d", proxy_ip, "-p", "tcp", "--dport", str(port),
                   *tag, "-j", "RETURN"]),
            (fwd, ["-i", bridge, "-o", bridge, "-s", proxy_ip, "-d", subnet, "-p", "tcp", "--sport", str(port),
                   *tag, "-j", "RETURN"]),
            (fwd, ["-i", bridge, *tag, "-j", "DROP"]),
            (fwd, ["-o", bridge, *tag, "-j", "DROP"]),
        ]
        # Each rule goes in at position 1, last first: our rules keep their order at the top of
        # the chain even when another session inserts its own at the same time. (Nothing runs on
        # the network yet, so the moment where the drops precede the returns harms no one.)
        for chain, spec in reversed(rules):
            self._run(self.iptables, ["-I", chain, "1", *spec])
        if self._ipv6_on() and self.ip6tables:
            fwd6 = self._forward_chain(self.ip6tables)
            self._run(self.ip6tables, ["-I", "INPUT", "1", "-i", bridge, *tag, "-j", "DROP"])
            self._run(self.ip6tables, ["-I", fwd6, "1", "-i", bridge, *tag, "-j", "DROP"])
            self._run(self.ip6tables, ["-I", fwd6, "1", "-o", bridge, *tag, "-j", "DROP"])

    def install_closed(self, bridge: str) -> None:
        """A bridge with no egress whose sandboxes the host may still connect to (publish.py):
        the host drops what the bridge sends it but the answers to the host's own connections,
        and nothing is forwarded into or out of it."""
        tag = ["-m", "comment", "--comment", self.comment]
        for tool in filter(None, (self.iptables, self.ip6tables if self._ipv6_on() else None)):
            fwd = self._forward_chain(tool)
            rules = [
                ("INPUT", ["-i", bridge, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", *tag, "-j", "ACCEPT"]),
                ("INPUT", ["-i", bridge, *tag, "-j", "DROP"]),
                (fwd, ["-i", bridge, *tag, "-j", "DROP"]),
                (fwd, ["-o", bridge, *tag, "-j", "DROP"]),
            ]
            for chain, spec in reversed(rules):
                self._run(tool, ["-I", chain, "1", *spec])

    def rules(self) -> list[tuple[str, str]]:
        """(tool, '-A CHAIN ...') of every rule carrying this session's comment."""
        found = []
        for tool in (self.iptables, self.ip6tables):
            if not tool:
                continue
            res = self._run(tool, ["-S"], check=False)
            for line in res.stdout.splitlines():
                if line.startswith("-A ") and _has_comment(line, self.comment):
                    found.append((tool, line))
        return found

    def remove(self) -> list[str]:
        """Delete every rule of this session; return the ones that could not be deleted."""
        failed = []
        for tool, line in self.rules():
            import shlex

            spec = shlex.split(line)
            spec[0] = "-D"
            if self._run(tool, spec, check=False).returncode != 0:
                failed.append(line)
        return failed


def _has_comment(line: str, comment: str) -> bool:
    import shlex

    try:
        words = shlex.split(line)
    except ValueError:
        return False
    return any(w == "--comment" and i + 1 < len(words) and words[i + 1] == comment for i, w in enumerate(words))


def remove_session_rules(session: str) -> list[str]:
    """Remove the firewall rules of `session` (for a reaper); return those that stayed."""
    return Firewall(session).remove()


class Egress:
    """Networks, proxy container and host firewall of one session's allowlist mode."""

    def __init__(self, client, session: str, allow: list[str], *, labels: dict[str, str] | None = None,
                 ttl: float = 24 * 3600, image: str = DEFAULT_IMAGE, extra_hosts: dict[str, str] | None = None,
                 max_conns: int = 64, idle_timeout: float = 120, connect_timeout: float = 10,
                 memory: str = "64m", pids: int = 64, ready_timeout: float = 20,
                 outside_network: str | None = None, broker: list[dict] | None = None,
                 tls_ca: dict[str, str] | None = None, on_event=None) -> None:
        if not session or any(c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-" for c in session):
            raise InvalidConfig(f"bad session name {session!r}: use letters, digits, '.', '_' and '-'")
        try:
            egress_proxy.parse_allow(allow)
        except ValueError as e:
            raise InvalidConfig(str(e)) from None
        self.client = client
        self.session = session
        self.allow = list(allow)
        self.labels = dict(labels or {})
        self.ttl = ttl
        self.image = image
        self.extra_hosts = dict(extra_hosts or {})
        self.limits = dict(max_conns=max_conns, idle_timeout=idle_timeout, connect_timeout=connect_timeout)
        self.memory, self.pids, self.ready_timeout = memory, pids, ready_timeout
        self.inside_name, self.outside_name = network_names(session)
        # An existing network for the proxy's way out (e.g. "bridge") is used, never removed.
        self.own_outside = outside_network is None
        if outside_network is not None:
            self.outside_name = outside_network
        self.firewall = Firewall(session)
        self.inside = self.outside = self.proxy = None
        self._log: _LogTail | None = None
        self.broker = [dict(b) for b in (broker or [])]
        self.tls_ca = dict(tls_ca or {})  # host -> PEM of the CA its real server is verified with
        self.on_event = on_event
        self.ca = None  # egress_tls.SessionCA once started with brokered secrets
        self.ca_dir: str | None = None  # host directory of the CA certificate and bundle the sandbox mounts
        self._trust: str | None = None
        self.bridge: str | None = None
        self.subnet: str | None = None
        self.proxy_ip: str | None = None

    # -- what the sandbox needs -------------------------------------------------------------
    @property
    def sandbox_network(self) -> str:
        """The network to give the sandbox (SandboxConfig.network)."""
        return self.inside_name

    @property
    def outside_network(self) -> str:
        """The proxy's network with a route out (tests attach the servers they run here)."""
        return self.outside_name

    @property
    def sandbox_dns(self) -> list[str]:
        """SandboxConfig.dns: an upstream that is a dead end, so DNS cannot carry data out."""
        return list(SANDBOX_DNS)

    @property
    def proxy_url(self) -> str:
        return f"http://{PROXY_ALIAS}:{PROXY_PORT}"

    @property
    def proxy_env(self) -> dict[str, str]:
        u = self.proxy_url
        env = {"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
               "ALL_PROXY": u, "all_proxy": u, "NO_PROXY": "", "no_proxy": ""}
        if self.ca_dir is not None:
            bundle = f"{SANDBOX_CA_DIR}/bundle.pem"
            env.update(SSL_CERT_FILE=bundle, REQUESTS_CA_BUNDLE=bundle, CURL_CA_BUNDLE=bundle, GIT_SSL_CAINFO=bundle,
                       NODE_EXTRA_CA_CERTS=f"{SANDBOX_CA_DIR}/ca.pem")
        return env

    def sandbox_mounts(self) -> list:
        """Read-only mounts that make the sandbox trust the session CA (none without brokering)."""
        if self.ca_dir is None:
            return []
        from .config import Mount

        return [Mount(source=self.ca_dir, target=SANDBOX_CA_DIR, read_only=True, scan=False),
                Mount(source=os.path.join(self.ca_dir, "bundle.pem"), target=SYSTEM_BUNDLE, read_only=True, scan=False)]

    def sandbox_config_fields(self) -> dict:
        """The SandboxConfig fields allowlist mode sets (merge `env` and `mounts` with the sandbox's own)."""
        fields = {"network": self.sandbox_network, "dns": self.sandbox_dns, "env": self.proxy_env}
        if self.ca_dir is not None:
            fields["mounts"] = self.sandbox_mounts()
        return fields

    # -- brokering and live changes --------------------------------------------------------
    def _brokering(self) -> None:
        """The session CA and the directory the sandbox trusts it from (brokered secrets only)."""
        import tempfile

        from .egress_tls import SessionCA, host_trust_store

        self.ca = SessionCA(self.session, ttl=self.ttl)
        self._trust = host_trust_store()
        self.ca_dir = tempfile.mkdtemp(prefix=f"runner-egress-ca-{self.session}-")
        os.chmod(self.ca_dir, 0o755)  # the sandbox's user reads it; it holds certificates only, no key
        for name, text in (("ca.pem", self.ca.cert_pem), ("bundle.pem", self._trust.rstrip("\n") + "\n" + self.ca.cert_pem)):
            path = os.path.join(self.ca_dir, name)
            with open(path, "w", encoding="ascii") as f:
                f.write(text)
            os.chmod(path, 0o644)

    def _proxy_config(self) -> dict:
        """What the proxy is told on stdin: the allowlist, and with brokering the secrets, a leaf
        per brokering host and the trust each real server is verified with."""
        cfg: dict = {"allow": self.allow}
        if self.broker:
            if self.ca is None:
                raise EgressUnavailable("brokered secrets on an egress started without them: restart the session")
            hosts = sorted({h for b in self.broker for h in b["hosts"]})
            cfg["broker"] = self.broker
            cfg["tls"] = {h: self.ca.leaf(h) for h in hosts}
            cfg["trust"] = {"*": self._trust or "", **self.tls_ca}
        return cfg

    def _tell(self, cfg: dict) -> None:
        if self._log is None:
            raise EgressUnavailable("the egress proxy is not running")
        self._log.send((json.dumps(cfg, separators=(",", ":")) + "\n").encode("utf-8"))

    def update(self, allow: list[str] | None = None, broker: list[dict] | None = None,
               tls_ca: dict[str, str] | None = None) -> None:
        """Change the allowlist (and the brokered secrets' hosts) of the running proxy: new
        connections follow it at once. Raises InvalidConfig for a bad allowlist."""
        if allow is not None:
            try:
                egress_proxy.parse_allow(allow)
            except ValueError as e:
                raise InvalidConfig(str(e)) from None
        new_allow = list(allow) if allow is not None else self.allow
        new_broker = [dict(b) for b in broker] if broker is not None else self.broker
        new_ca = dict(tls_ca) if tls_ca is not None else self.tls_ca
        if new_broker and self.ca is None:
            raise InvalidConfig("this session started without brokered secrets: add them with a new session")
        old = (self.allow, self.broker, self.tls_ca)
        self.allow, self.broker, self.tls_ca = new_allow, new_broker, new_ca
        try:
            self._tell(self._proxy_config())
        except BaseException:
            self.allow, self.broker, self.tls_ca = old
            raise

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "Egress":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.firewall.check()
        try:
            self._start()
        except BaseException:
            try:
                self.stop()
            except Exception:
                pass
            raise

    def _start(self) -> None:
        from .engine import require_image

        require_image(self.client, self.image)
        if self.broker:
            self._brokering()
        net_labels = L.make_labels(self.session, self.ttl, role="egress-network", extra=self.labels)
        self.inside = self.client.networks.create(self.inside_name, driver="bridge", internal=True,
                                                  labels=net_labels, check_duplicate=True)
        if self.own_outside:
            self.outside = self.client.networks.create(self.outside_name, driver="bridge", internal=False,
                                                       labels=net_labels, check_duplicate=True)
        else:
            self.outside = self.client.networks.get(self.outside_name)
            if self.outside.attrs.get("Internal"):
                raise InvalidConfig(f"network {self.outside_name} is internal: the proxy needs a way out")
        self.inside.reload()
        info = self.inside.attrs
        self.bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name") or f"br-{info['Id'][:12]}"
        configs = (info.get("IPAM") or {}).get("Config") or []
        v4 = [c["Subnet"] for c in configs if c.get("Subnet") and ipaddress.ip_network(c["Subnet"]).version == 4]
        if not v4:
            raise EgressUnavailable(f"network {self.inside_name} has no IPv4 subnet: {configs}")
        self.subnet = v4[0]
        if not os.path.exists(f"/sys/class/net/{self.bridge}"):
            raise EgressUnavailable(f"the bridge {self.bridge} of {self.inside_name} is not on this host: allowlist "
                                    "mode needs a local engine whose bridges it can firewall")
        self.proxy = self._create_proxy()
        self._log = _LogTail(self.client.api.attach_socket(self.proxy.id, params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                                                   "stream": 1}),
                             on_event=self._event)
        self.inside.connect(self.proxy, aliases=[PROXY_ALIAS])
        # The engine gives addresses at start; no sandbox is on the network before we return.
        self.proxy.start()
        self._tell(self._proxy_config())  # it serves once it has read this line
        self.proxy.reload()
        self.proxy_ip = self.proxy.attrs["NetworkSettings"]["Networks"][self.inside_name]["IPAddress"]
        if not self.proxy_ip or ipaddress.ip_address(self.proxy_ip) not in ipaddress.ip_network(self.subnet):
            raise EgressUnavailable(f"the egress proxy got no address on {self.inside_name} ({self.proxy_ip!r})")
        self.firewall.install(self.bridge, self.subnet, self.proxy_ip, PROXY_PORT)
        self._wait_ready()

    def _event(self, ev: dict) -> None:
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:
                pass  # an audit that fails must not stop the proxy's log

    def _create_proxy(self):
        # the allowlist and the secrets come on stdin (_proxy_config), never in the command line
        cfg = {"control": "stdin", "port": PROXY_PORT, "clients": [self.subnet], **self.limits}
        from docker.types import LogConfig

        return self.client.containers.create(
            self.image,
            ["python3", "-I", "-u", "-c", _proxy_source(), json.dumps(cfg)],
            name=f"runner-egress-{self.session}",
            use_config_proxy=False,  # not the proxies of the user's ~/.docker/config.json
            user="65534:65534",
            labels=L.make_labels(self.session, self.ttl, role="egress-proxy", extra=self.labels),
            network=self.outside_name,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            read_only=True,
            init=True,
            pids_limit=self.pids,
            mem_limit=self.memory,
            memswap_limit=self.memory,
            nano_cpus=int(0.5e9),
            ipc_mode="private",
            extra_hosts=self.extra_hosts or None,
            log_config=LogConfig(type="none"),  # its log is read over attach (_LogTail), never on disk
            environment={},
            stdin_open=True,  # its configuration (with secret values) comes this way
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            logs = self.logs()
            if egress_proxy.READY in logs:
                return
            self.proxy.reload()
            if self.proxy.status not in ("created", "running") or time.monotonic() > deadline:
                raise EgressUnavailable(f"the egress proxy did not start ({self.proxy.status}): {logs.strip()[-500:]}")
            time.sleep(0.05)

    def logs(self) -> str:
        """The proxy's log: one line per connection allowed or refused."""
        if self.proxy is None or self._log is None:
            return ""
        return self._log.text()

    def _gone(self, name: str, within: float = 30.0) -> bool:
        """Whether the container `name` is gone within `within` seconds (a removal under way elsewhere)."""
        import docker.errors

        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                self.client.containers.get(name)
            except docker.errors.NotFound:
                return True
            except docker.errors.APIError:
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """Remove the proxy, the networks (disconnecting whatever is still on them) and the
        firewall rules. Raises EgressUnavailable naming what could not be removed."""
        import docker.errors

        problems = []
        proxy, self.proxy = self.proxy, None
        log, self._log = self._log, None
        if log is not None:
            log.close()
        try:
            (proxy or self.client.containers.get(f"runner-egress-{self.session}")).remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as e:
            # another remover got there first (`runner gc` beside a closing Runner): its removal is
            # waited for, not counted as a failure of this one
            if not (e.status_code == 409 and "already in progress" in str(e) and self._gone(f"runner-egress-{self.session}")):
                problems.append(f"proxy container: {e}")
        except Exception as e:
            problems.append(f"proxy container: {e}")
        networks_gone = True
        for name in (self.inside_name, self.outside_name) if self.own_outside else (self.inside_name,):
            try:
                net = self.client.networks.get(name)
            except docker.errors.NotFound:
                continue
            except Exception as e:
                problems.append(f"network {name}: {e}")
                networks_gone = False
                continue
            try:
                net.reload()
                for cid in (net.attrs.get("Containers") or {}):
                    try:
                        net.disconnect(cid, force=True)
                    except docker.errors.APIError:
                        pass
                net.remove()
            except docker.errors.NotFound:
                pass
            except Exception as e:
                problems.append(f"network {name}: {e}")
                networks_gone = False
        self.inside = self.outside = None
        # The host stays closed off while a sandbox bridge may still exist.
        ca_dir, self.ca_dir = getattr(self, "ca_dir", None), None
        if ca_dir is not None:
            shutil.rmtree(ca_dir, ignore_errors=True)
        if networks_gone:
            left = self.firewall.remove()
            if left:
                problems.append(f"firewall rules: {left}")
        else:
            problems.append(f"firewall rules tagged {self.firewall.comment!r} kept while the network remains")
        if problems:
            raise EgressUnavailable("egress teardown left things behind: " + "; ".join(problems))


def reap_orphans(client, dry_run: bool = False, only: set[str] | None = None) -> list[tuple[str, str]]:
    """For `runner gc`: tear down the egress of every session whose owner is gone or whose time
    is up (proxy, networks, firewall rules), and firewall rules whose network no longer exists.
    Returns (session, reason) for each. only: these sessions alone (runner serve's own)."""
    done: list[tuple[str, str]] = []
    # The rules before the networks: a start makes its networks, then its rules, so every session
    # whose rules are listed here has its networks in the listing below (listed the other way round,
    # a start between the two was taken for rules without their network and torn down)
    with_rules: list[str] = []
    for tool in ("iptables", "ip6tables"):
        if not shutil.which(tool):
            continue
        res = run_tables([tool, "-w", "10", "-S"])
        for line in res.stdout.splitlines():
            if COMMENT_PREFIX not in line:
                continue
            session = line.split(COMMENT_PREFIX, 1)[1].split('"', 1)[0].split(" ", 1)[0]
            if session and session not in with_rules:
                with_rules.append(session)
    sessions_with_network = set()
    for net in client.networks.list(filters={"label": f"{L.MANAGED}=true"}):
        labels = net.attrs.get("Labels") or {}
        session = labels.get(L.SESSION, "")
        if labels.get(L.ROLE) != "egress-network" or net.name not in network_names(session):
            continue
        sessions_with_network.add(session)
        why = L.orphan_reason(labels)
        if why and session not in {s for s, _ in done}:
            done.append((session, why))
    for session in with_rules:
        if session not in sessions_with_network and session not in {s for s, _ in done}:
            done.append((session, "firewall rules without their network"))
    if only is not None:
        done = [(s, why) for s, why in done if s in only]
    if not dry_run:
        for session, _ in done:
            eg = Egress.__new__(Egress)  # teardown only: no allowlist, no start
            eg.client, eg.session, eg.proxy = client, session, None
            eg.inside_name, eg.outside_name = network_names(session)
            eg.own_outside, eg.firewall = True, Firewall(session)
            eg.inside = eg.outside = eg._log = None
            eg.stop()
            import glob
            import tempfile

            for d in glob.glob(os.path.join(tempfile.gettempdir(), f"runner-egress-ca-{glob.escape(session)}-*")):
                shutil.rmtree(d, ignore_errors=True)  # the CA certificate the sandbox trusted (no key)
    return done


class _LogTail:
    """The proxy's stdout and stderr, read over attach; the newest LOG_KEEP characters are kept
    in memory (the container logs to no driver: nothing of it lands on the host's disk)."""

    def __init__(self, sock, on_event=None) -> None:
        import collections
        import threading

        from .process import _raw

        self.sock = _raw(sock)
        self.on_event = on_event
        self._partial = ""  # a line not yet ended (events are parsed by line)
        self.parts: collections.deque[str] = collections.deque()
        self.size = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="runner-egress-log", daemon=True).start()

    def _read(self) -> None:
        from .wire import Frames

        mux = Frames(self.sock)
        while (item := mux.frame()) is not None:
            text = item[1].decode("utf-8", errors="replace")
            if self.on_event is not None and item[0] == "stdout":
                self._events(text)
            with self.lock:
                self.parts.append(text)
                self.size += len(text)
                while self.size > LOG_KEEP and len(self.parts) > 1:
                    self.size -= len(self.parts.popleft())

    def _events(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[-65536:]
        for line in lines:
            if line.startswith(egress_proxy.EVENT + " "):
                try:
                    ev = json.loads(line[len(egress_proxy.EVENT) + 1:])
                except ValueError:
                    continue
                if isinstance(ev, dict):
                    self.on_event(ev)

    def send(self, data: bytes) -> None:
        """Write to the proxy's stdin (its configuration lines)."""
        self.sock.sendall(data)

    def text(self) -> str:
        with self.lock:
            return "".join(self.parts)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
