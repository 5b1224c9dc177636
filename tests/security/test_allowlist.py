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


@pytest.fixture
def server(docker_client):
    """A web server container on a network of the test's own; yields (network, ip)."""
    name = f"runner-test-{uuid.uuid4().hex[:8]}"
    net = docker_client.networks.create(name, driver="bridge", labels={"runner.test": "allowlist"})
    c = docker_client.containers.run("runner/base:latest", ["python3", "-m", "http.server", "8000", "-d", "/etc"],
                                     detach=True, network=name, user="1000:1000", cap_drop=["ALL"],
                                     labels={"runner.test": "allowlist"}, read_only=True)
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
