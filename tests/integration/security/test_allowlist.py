"""Network allowlist mode through the Runner (docker): tools reach listed servers only, through
the egress proxy runner starts; everything else is refused before any packet leaves. The only
servers here are containers this test starts, on a network it creates."""
from __future__ import annotations

import subprocess
import uuid

import pytest

from runner import Runner
from runner.policy import load

pytestmark = pytest.mark.usefixtures("no_leaks")


ALIASES = ["api.svc.test", "deep.api.svc.test", "svc.test", "api.other.test"]  # names on the test's network


@pytest.fixture
def server(docker_client):
    """A web server container on a network of the test's own, also known there by ALIASES (the
    engine's DNS answers them to the egress proxy); yields (network, ip)."""
    from docker.types import EndpointConfig

    name = f"runner-test-{uuid.uuid4().hex[:8]}"
    net = docker_client.networks.create(name, driver="bridge", labels={"runner.test": "allowlist"})
    c = docker_client.containers.run("runner/base:latest", ["python3", "-m", "http.server", "8000", "-d", "/etc"],
                                     detach=True, network=name, user="1000:1000", cap_drop=["ALL"],
                                     labels={"runner.test": "allowlist"}, read_only=True,
                                     networking_config={name: EndpointConfig(docker_client.api._version,
                                                                             aliases=ALIASES)})
    try:
        c.reload()
        ip = c.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
        probe = "import urllib.request,time\nfor i in range(100):\n try: urllib.request.urlopen('http://127.0.0.1:8000/',timeout=1); break\n except OSError: time.sleep(0.1)"
        c.exec_run(["python3", "-c", probe])
        yield name, ip
    finally:
        c.remove(force=True)
        net.remove()


def test_listed_server_is_reached_and_nothing_else(server, tmp_path):
    network, ip = server
    pol = load("default").effective(overrides={"network.mode": "allowlist", "network.allow": [f"{ip}:8000"],
                                               "tools.allow": ["http_fetch"]})
    with Runner(executor="docker", workspace=tmp_path, policy=pol, egress_network=network) as r:
        res = r.call("http_fetch", {"url": f"http://{ip}:8000/hostname"})
        assert not res.is_error and res.meta["status"] == 200, res.text
        for url in (f"http://{ip}:8001/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/"):
            res = r.call("http_fetch", {"url": url})
            assert res.is_error and "not in the policy's network allowlist; nothing was sent" in res.text
        # bash goes through the proxy too (its environment names it); unlisted means 403 with the reason
        code = ("import urllib.request, urllib.error\n"
                "for u in ['http://%s:8000/hostname', 'http://%s:8002/', 'http://169.254.169.254/']:\n"
                "    try:\n        print(urllib.request.urlopen(u, timeout=10).status)\n"
                "    except urllib.error.HTTPError as e:\n        print(e.code, e.read().decode().strip())\n"
                "    except OSError as e:\n        print('error', e)\n") % (ip, ip)
        out = r.call("bash", {"command": f"python3 - <<'PY'\n{code}PY"}).text.splitlines()
        assert out[0] == "200"
        assert out[1].startswith("403") and out[2].startswith("403") and "169.254.169.254" in out[2]
        # and nothing reaches the server directly, bypassing the proxy
        direct = r.call("bash", {"command": f"NO_PROXY='*' python3 -c \"import socket; socket.create_connection(('{ip}', 8000), 3)\""})
        assert direct.is_error
    names = [n.name for n in __import__("docker").from_env().networks.list()]
    assert not [n for n in names if n.startswith(f"runner-egress-{r.session_id}")]
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert f"runner-egress:{r.session_id}" not in rules


def test_a_wildcard_entry_reaches_the_names_under_it_and_nothing_else(server, tmp_path):
    """`*.svc.test:8000` lets tools reach api.svc.test and deep.api.svc.test (the server is on a
    private address, so an address entry must list it too: a name never unlocks one), not
    svc.test itself nor another domain. Before the one grammar the policy accepted the entry
    and the run exited 2 ("'*.svc.test' is not a host name")."""
    network, ip = server
    pol = load("default").effective(overrides={"network.mode": "allowlist",
                                               "network.allow": ["*.svc.test:8000", f"{ip}:8000"],
                                               "tools.allow": ["http_fetch"]})
    with Runner(executor="docker", workspace=tmp_path, policy=pol, egress_network=network) as r:
        for host in ("api.svc.test", "deep.api.svc.test"):
            res = r.call("http_fetch", {"url": f"http://{host}:8000/hostname"})
            assert not res.is_error and res.meta["status"] == 200, res.text
        for url in ("http://svc.test:8000/hostname", "http://api.other.test:8000/hostname",
                    "http://api.svc.test:8001/"):
            res = r.call("http_fetch", {"url": url})
            assert res.is_error and "not in the policy's network allowlist; nothing was sent" in res.text, res.text
        # the proxy decides the same for a program in bash (its environment names the proxy)
        code = ("import urllib.request, urllib.error\n"
                "for u in ['http://api.svc.test:8000/hostname', 'http://svc.test:8000/', 'http://api.other.test:8000/']:\n"
                "    try:\n        print(urllib.request.urlopen(u, timeout=10).status)\n"
                "    except urllib.error.HTTPError as e:\n        print(e.code, e.read().decode().strip())\n"
                "    except OSError as e:\n        print('error', e)\n")
        out = r.call("bash", {"command": f"python3 - <<'PY'\n{code}PY"}).text.splitlines()
        assert out[0] == "200", out
        assert out[1] == "403 runner egress: svc.test:8000 is not in the allowlist", out
        assert out[2] == "403 runner egress: api.other.test:8000 is not in the allowlist", out
