"""What a tenant writes into its workspace against the server: trees deep enough to break a
recursive walk, a quota bash and custom tools must respect, names built to match another tenant's
engine resources. The real server on a loopback port, a real client, the real engine."""
from __future__ import annotations

import os
import subprocess

import pytest

from runner.servers.serve.network import network_name

from .conftest import add_tenant, runner_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

DEEP = "/".join(["d"] * 1100) + "/f"  # past Python's recursion limit: shutil.rmtree raised RecursionError


@pytest.fixture
def tidy(data):
    """What the server could not remove goes by remove_tree: pytest's own clean-up (shutil.rmtree)
    raises RecursionError on it and would end the run of whoever cleans the base temp next."""
    yield
    from runner.untrusted.wspath import remove_tree

    remove_tree(data)


def test_a_tree_too_deep_for_recursion_is_removed_and_never_stops_the_server(start_server, data, policy_file, tidy):
    """Issue 43, hole 2: one PUT of a file 1100 directories deep made DELETE answer 500, left the
    workspace on disk, and the server exited at every later start while adopting it."""
    key = add_tenant("deep", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.put(f"/v1/sessions/{sid}/files/{DEEP}", content=b"x").status_code == 204
        ws = data / "workspaces" / "deep" / sid
        assert (ws / DEEP).is_file()
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert not ws.exists()
        # a tree that cannot be removed wholly (here a filesystem mounted in it, as root) is said,
        # left for later, and stops nothing: the session ends, the server goes on
        sid2 = c.post("/v1/sessions", json={}).json()["id"]
        assert c.put(f"/v1/sessions/{sid2}/files/{DEEP}", content=b"x").status_code == 204
        ws2 = data / "workspaces" / "deep" / sid2
        mount = ws2 / "m"
        mount.mkdir()
        mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "runner-test", str(mount)],
                                                       capture_output=True).returncode == 0
        try:
            assert c.delete(f"/v1/sessions/{sid2}").status_code == 204
            assert c.get("/v1/sessions").status_code == 200
            assert not (ws2 / "d").exists()
            assert server.stop() == 0
            if mounted:
                assert mount.is_dir()
                wait_for(lambda: any("not wholly removed" in line for line in server.stderr), 10, "the leftover said")
                # the next start meets the closed session's workspace again: it says so, and serves
                again = start_server("--data", str(data))
                with again.client(key) as c2:
                    assert c2.get("/v1/sessions").status_code == 200
                assert again.stop() == 0
                wait_for(lambda: any("not wholly removed" in line for line in again.stderr), 10, "the leftover said")
        finally:
            if mounted:
                subprocess.run(["umount", str(mount)], check=True)
    # once it can be removed, a start removes it
    third = start_server("--data", str(data))
    with third.client(key) as c:
        assert c.get("/v1/sessions").status_code == 200
    assert not ws2.exists()
    assert third.stop() == 0


def test_removing_a_tenant_removes_its_deep_trees(start_server, data, policy_file, tidy):
    """`runner tenants remove` removed workspaces with shutil.rmtree: a deep tree made it crash
    with RecursionError half-way, the tenant's rows gone and its workspace left for ever."""
    key = add_tenant("gone", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.put(f"/v1/sessions/{sid}/files/{DEEP}", content=b"x").status_code == 204
    assert server.stop() == 0  # the session stays open, for the next start
    out = subprocess.run(runner_argv("tenants", "remove", "gone", "--data", str(data)), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not (data / "workspaces" / "gone").exists()


def test_a_killed_servers_mcp_workspaces_are_removed_at_the_next_start(start_server, data, policy_file, tidy):
    """MCP sessions live in their server's memory: after a kill -9 their workspaces (here with a
    tree 1100 deep in one, as bash can make) stayed on disk for ever, outside every quota."""
    import httpx

    from .test_mcp import INIT

    key = add_tenant("mk", data, policy_file)
    server = start_server("--data", str(data))
    h = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
         "Content-Type": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    r = httpx.post(server.url + "/mcp", json=INIT, headers=h, timeout=120)
    assert r.status_code == 200 and r.headers.get("mcp-session-id"), r.text
    h["mcp-session-id"] = r.headers["mcp-session-id"]
    httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h,
               timeout=120)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": {
        "command": "echo made"}}}
    r = httpx.post(server.url + "/mcp", json=call, headers=h, timeout=120)
    assert r.status_code == 200 and "made" in r.text, r.text
    homes = list((data / "mcp" / "mk").iterdir())
    assert len(homes) == 1
    from runner.untrusted.wspath import make_dirs

    make_dirs(homes[0], DEEP)  # as bash in the sandbox can
    server.proc.kill()
    server.proc.wait()
    assert homes[0].exists()
    again = start_server("--data", str(data))
    assert not any((data / "mcp" / "mk").iterdir())
    assert again.stop() == 0


QUOTA = """\
extends: default
name: quota
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {memory: 256m, pids: 128, max_write: 64k, timeout: 60, workspace: 1m}
"""


def test_the_workspace_quota_stops_bash_and_counts_every_entry(start_server, data, tmp_path):
    """Issue 43, hole 6: with a 1 MiB quota three bash calls wrote 3 MB each; 3000 directories
    counted as 0. Now one call may overshoot, the next is refused (reading tools still run)."""
    pol = tmp_path / "quota.yaml"
    pol.write_text(QUOTA)
    key = add_tenant("full", data, pol)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        def call(sid, tool, args):
            r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": tool, "args": args})
            assert r.status_code == 200, r.text
            return r.json()

        sid = c.post("/v1/sessions", json={}).json()["id"]
        ws = data / "workspaces" / "full" / sid
        first = call(sid, "bash", {"command": "head -c 3000000 /dev/zero > a.bin && echo wrote"})
        assert not first["is_error"] and first["content"] == "wrote\n", first
        second = call(sid, "bash", {"command": "head -c 3000000 /dev/zero > b.bin && echo wrote"})
        assert second["is_error"] and "quota" in second["content"], second
        assert not (ws / "b.bin").exists()
        assert "a.bin" in call(sid, "ls", {})["content"]
        assert c.put(f"/v1/sessions/{sid}/files/c.txt", content=b"x").status_code == 413
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204

        sid = c.post("/v1/sessions", json={}).json()["id"]
        made = call(sid, "bash", {"command": "mkdir $(seq -f 'd%g' 3000) && echo made"})
        assert made["content"] == "made\n", made
        refused = call(sid, "bash", {"command": "echo next"})
        assert refused["is_error"] and "quota" in refused["content"], refused
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    assert server.stop() == 0


ALLOWLIST = """\
extends: default
name: egress
sandbox: {lifecycle: per-session, pool_size: 0}
network: {mode: allowlist, allow: ["127.0.0.1:9"]}
"""


def test_a_tenant_whose_name_another_extends_keeps_its_network(start_server, data, tmp_path, docker_client):
    """Issue 43, hole 8: the tenant network was looked up with the engine's name filter, which
    matches substrings: once `runner-tenant-nx-eu` existed, tenant nx found it, made no network
    of its own, and its sessions could not start."""
    pol = tmp_path / "egress.yaml"
    pol.write_text(ALLOWLIST)
    keys = {t: add_tenant(t, data, pol) for t in ("nx-eu", "nx")}
    names = {t: network_name(t, data) for t in keys}  # runner-tenant-NAME-TAG
    server = start_server("--data", str(data))
    for t in ("nx-eu", "nx"):  # the longer name first
        with server.client(keys[t]) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo up"}})
            assert r.status_code == 200 and r.json()["content"] == "up\n", r.text
            proxies = docker_client.api.containers(filters={"label": [f"runner.session={sid}",
                                                                      "runner.role=egress-proxy"]})
            assert len(proxies) == 1 and set(proxies[0]["NetworkSettings"]["Networks"]) & set(names.values()) \
                == {names[t]}
            assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    assert server.stop() == 0
    left = {n["Name"] for n in docker_client.api.networks(names=["runner-tenant-nx"])}
    assert not left & set(names.values()), left
