"""`PATCH /v1/sessions/{id}/policy`: a tenant changes its live session's allowlist within its
grant (the policy it started with); the egress proxy follows for the next connection. The
addresses here are the proxy container's own loopback (127.0.0.x:9): nothing leaves it."""
from __future__ import annotations

import pytest

from .conftest import add_tenant

pytestmark = pytest.mark.usefixtures("no_leaks")

ALLOWLIST = """\
extends: default
name: egress
sandbox: {lifecycle: per-session, pool_size: 0}
network: {mode: allowlist, allow: ["127.0.0.1:9", "127.0.0.2:9"]}
"""

PROBE = ("python3 -c \"import urllib.request, urllib.error\ntry: urllib.request.urlopen('http://127.0.0.2:9/', "
         "timeout=20)\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode().strip())\"")


def probe(c, sid) -> str:
    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": PROBE}})
    assert r.status_code == 200, r.text
    return r.json()["content"]


def test_a_tenant_narrows_and_restores_its_allowlist_but_never_widens_it(start_server, data, tmp_path):
    pol = tmp_path / "egress.yaml"
    pol.write_text(ALLOWLIST)
    key, other = add_tenant("ta", data, pol), add_tenant("tb", data, pol)
    server = start_server("--data", str(data))
    with server.client(key) as c, server.client(other) as o:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert probe(c, sid).startswith("502 runner egress: cannot connect")  # listed: tried, nothing there
        r = c.patch(f"/v1/sessions/{sid}/policy", json={"network": {"allow": ["127.0.0.1:9"]}})
        assert r.status_code == 200 and r.json()["network"]["allow"] == ["127.0.0.1:9"], r.text
        assert probe(c, sid).startswith("403 runner egress: 127.0.0.2:9 is a loopback address and not listed")
        r = c.patch(f"/v1/sessions/{sid}/policy", json={"network": {"allow": ["127.0.0.1:9", "10.0.0.1:80"]}})
        assert r.status_code == 403 and "not in the granted policy" in r.json()["detail"]
        r = c.patch(f"/v1/sessions/{sid}/policy", json={"network": {"tls_ca_file": {"x.test": "/etc/passwd"}}})
        assert r.status_code == 403
        r = c.patch(f"/v1/sessions/{sid}/policy", json={"network": {"mode": "none"}})
        assert r.status_code == 422 and "cannot change on a live session" in r.json()["detail"]
        assert o.patch(f"/v1/sessions/{sid}/policy", json={"network": {"allow": []}}).status_code == 404
        r = c.patch(f"/v1/sessions/{sid}/policy", json={"network": {"allow": ["127.0.0.1:9", "127.0.0.2:9"]}})
        assert r.status_code == 200
        assert probe(c, sid).startswith("502")
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def test_the_python_client_changes_the_policy_too(start_server, data, tmp_path):
    from runner.client import RemoteRunner

    pol = tmp_path / "egress.yaml"
    pol.write_text(ALLOWLIST)
    key = add_tenant("ta", data, pol)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        assert r.update_policy({"network": {"allow": ["127.0.0.1:9"]}})["network"]["allow"] == ["127.0.0.1:9"]
        assert r.call("bash", {"command": PROBE}).text.startswith("403")
        with pytest.raises(Exception, match="403"):
            r.update_policy({"network": {"allow": ["10.9.9.9:80"]}})
