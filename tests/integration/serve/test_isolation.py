"""Isolation in allowlist mode: each tenant's sessions leave through a network of that tenant's
own (runner-tenant-NAME-TAG, labelled with it; network_name); no egress proxy sits on two tenants' networks; the
networks go when the server stops."""
from __future__ import annotations

import signal
import subprocess

import pytest

from .conftest import add_tenant, runner_argv
from runner.servers.serve.network import network_name

pytestmark = pytest.mark.usefixtures("no_leaks")

ALLOWLIST = """\
extends: default
name: egress
sandbox: {lifecycle: per-session, pool_size: 0}
network: {mode: allowlist, allow: ["127.0.0.1:9"]}
"""


def test_a_network_per_tenant_in_allowlist_mode(start_server, data, tmp_path, docker_client):
    pol = tmp_path / "egress.yaml"
    pol.write_text(ALLOWLIST)
    keys = {t: add_tenant(t, data, pol) for t in ("ta", "tb")}
    server = start_server("--data", str(data))
    sids = {}
    for t, key in keys.items():
        with server.client(key) as c:
            sids[t] = c.post("/v1/sessions", json={}).json()["id"]
            r = c.post(f"/v1/sessions/{sids[t]}/calls", json={"tool": "bash", "args": {"command": "echo up"}})
            assert r.status_code == 200 and r.json()["content"] == "up\n", r.text
    for t, sid in sids.items():
        proxies = docker_client.api.containers(filters={"label": [f"runner.session={sid}", "runner.role=egress-proxy"]})
        assert len(proxies) == 1 and proxies[0]["Labels"]["runner.tenant"] == t
        nets = set(proxies[0]["NetworkSettings"]["Networks"])
        assert network_name(t, data) in nets
        other = "tb" if t == "ta" else "ta"
        assert network_name(other, data) not in nets
        net = docker_client.api.inspect_network(network_name(t, data))
        assert net["Labels"]["runner.tenant"] == t
        members = {c["Name"] for c in net["Containers"].values()}
        assert members == {proxies[0]["Names"][0].lstrip("/")}
    # killed: its sessions' egress (proxies, networks, firewall rules) stays until a restart reaps it
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    for sid in sids.values():
        cs, nets, rules = egress_of(docker_client, sid)
        assert cs and nets and rules, (cs, nets, rules)
    again = start_server("--data", str(data))
    for sid in sids.values():
        assert egress_of(docker_client, sid) == ([], [], False)
    for t, key in keys.items():
        with again.client(key) as c:
            r = c.post(f"/v1/sessions/{sids[t]}/calls", json={"tool": "bash", "args": {"command": "echo again"}})
            assert r.status_code == 200 and r.json()["content"] == "again\n", r.text
            assert c.delete(f"/v1/sessions/{sids[t]}").status_code == 204
    again.stop()
    assert not docker_client.api.networks(names=[network_name("ta", data), network_name("tb", data)])
    for sid in sids.values():
        assert egress_of(docker_client, sid) == ([], [], False)


def egress_of(docker_client, sid: str):
    """(containers, networks, firewall rules present) of a session's egress."""
    cs = docker_client.api.containers(all=True, filters={"label": [f"runner.session={sid}"]})
    nets = [n["Name"] for n in docker_client.api.networks(names=[f"runner-egress-{sid}"])]
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    return cs, nets, f"runner-egress:{sid}" in rules


def test_runner_gc_removes_what_a_killed_server_left_when_none_restarts(start_server, data, tmp_path, docker_client):
    pol = tmp_path / "egress.yaml"
    pol.write_text(ALLOWLIST)
    key = add_tenant("tg", data, pol)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo up"}})
        assert r.status_code == 200, r.text
    assert docker_client.api.networks(names=["runner-tenant-tg"])
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    gc = subprocess.run(runner_argv("gc"), capture_output=True, text=True, timeout=300)
    assert gc.returncode == 0, gc.stderr
    out = gc.stdout
    assert "runner-tenant-tg" in out, out
    assert not docker_client.api.networks(names=["runner-tenant-tg"])
    assert egress_of(docker_client, sid) == ([], [], False)
