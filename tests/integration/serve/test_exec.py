"""POST /v1/exec: its timeout, its place among the tenant's sessions, and its container's end
(the client gone, the server killed)."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from .conftest import add_tenant, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

SHORT = """\
extends: default
name: short
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {timeout: 2, max_timeout: 3}
"""


def execs(docker_client, tenant: str, server) -> list[dict]:
    """This server's exec containers of the tenant (another run's server may have a tenant of that name)."""
    return docker_client.api.containers(all=True, filters={"label": ["runner.managed=true", "runner.role=serve-exec",
                                                                     f"runner.tenant={tenant}",
                                                                     f"runner.owner.pid={server.proc.pid}"]})


def test_an_exec_gets_the_policys_timeout_capped_by_its_maximum(start_server, data, tmp_path):
    pol = tmp_path / "short.yaml"
    pol.write_text(SHORT)
    key = add_tenant("short", data, pol, "--image", "runner/base")
    server = start_server("--data", str(data))
    with server.client(key, timeout=60) as c:
        for extra in ({}, {"timeout": 3600}):
            r = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "600"], **extra})
            assert r.status_code == 200, r.text
            assert r.json()["timed_out"] is True and r.json()["exit_code"] == 124, r.text


GVISOR = """\
extends: default
name: gvisor
sandbox: {runtime: runsc, lifecycle: per-session, pool_size: 0}
limits: {timeout: 20, max_timeout: 20, memory: 96m, pids: 48, cpus: 0.5}
"""


def test_an_exec_runs_under_the_policys_runtime_and_limits(start_server, data, tmp_path, docker_client):
    """The tenant's policy puts its sandboxes under gVisor with small limits; /v1/exec took only
    its timeout, and ran the command under crun with the default limits (a tenant confined to a
    user-space kernel reached the host's kernel through /v1/exec, and twice the memory)."""
    pol = tmp_path / "gvisor.yaml"
    pol.write_text(GVISOR)
    key = add_tenant("gv", data, pol, "--image", "runner/base")
    server = start_server("--data", str(data))
    seen: list = []

    def look():
        found = execs(docker_client, "gv", server)
        if found:
            seen.append(docker_client.api.inspect_container(found[0]["Id"])["HostConfig"])
        return found

    with server.client(key, timeout=60) as c:
        t = threading.Thread(target=lambda: seen.append(c.post("/v1/exec", json={
            "image": "runner/base", "cmd": ["sh", "-c", "uname -r; sleep 3"]})))
        t.start()
        wait_for(look, 30, "the exec's container")
        t.join(60)
    host, answer = seen[0], seen[-1]
    assert answer.status_code == 200 and answer.json()["exit_code"] == 0, answer.text
    assert answer.json()["stdout"].strip() == "4.4.0", answer.text  # gVisor's kernel, not the host's
    assert (host["Runtime"], host["Memory"], host["NanoCpus"]) == ("runsc", 96 * 2**20, 5 * 10**8), host
    assert host["PidsLimit"] == 48 * 16 + 64, host  # gVisor's own tasks counted (hardening.host_pids_limit)


def test_a_running_exec_counts_as_a_session_and_ends_with_its_client(start_server, data, policy_file, docker_client):
    import socket
    from urllib.parse import urlsplit

    key = add_tenant("one", data, policy_file, "--image", "runner/base", "--max-sessions", "1")
    server = start_server("--data", str(data))
    where = urlsplit(server.url)
    body = b'{"image": "runner/base", "cmd": ["sleep", "600"]}'
    # a client that leaves while its exec runs: it closes its connection once the checks are done
    # (it waited out a 30 s read timeout before)
    impatient = socket.create_connection((where.hostname, where.port))
    try:
        impatient.sendall(b"POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                          + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                          + b"\r\n\r\n" + body)
        with server.client(key) as c:
            wait_for(lambda: execs(docker_client, "one", server), 30, "the exec's container")
            full = c.post("/v1/sessions", json={})
            assert full.status_code == 429 and "1 running /v1/exec" in full.json()["detail"], full.text
            second = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["true"]})
            assert second.status_code == 429 and "1 running /v1/exec" in second.json()["detail"], second.text
            impatient.settimeout(0)
            with pytest.raises(BlockingIOError):  # still running: no answer yet
                impatient.recv(1)
            impatient.close()
            wait_for(lambda: not execs(docker_client, "one", server), 60, "the exec's container removed once its client left")
            wait_for(lambda: c.post("/v1/exec", json={"image": "runner/base", "cmd": ["true"]}).status_code == 200, 30,
                     "room for an exec again")
    finally:
        impatient.close()


def test_an_exec_whose_client_leaves_before_its_container_starts_never_runs_on(start_server, data, policy_file,
                                                                              docker_client):
    """A client gone before the exec's container existed: the removal by label found nothing, and
    the command then ran to its timeout (60 s here) with the tenant's place held (a review hit it
    closing a raw request after 50 ms; here the window is not hit for sure). The exec's own thread
    now kills it as it starts (the executor's cancel), whenever the client left."""
    import socket
    from urllib.parse import urlsplit

    key = add_tenant("early", data, policy_file, "--image", "runner/base", "--max-sessions", "1")
    server = start_server("--data", str(data))
    where = urlsplit(server.url)
    body = b'{"image": "runner/base", "cmd": ["sleep", "600"]}'
    for pause in (0.01, 0.03, 0.05, 0.1):  # gone while its thread loads the policy and makes the container
        with socket.create_connection((where.hostname, where.port)) as sock:
            sock.sendall(b"POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode()
                         + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                         + b"\r\n\r\n" + body)
            time.sleep(pause)
        with server.client(key) as c:  # its place is free again well before its 60 s would have run out
            wait_for(lambda: c.post("/v1/exec", json={"image": "runner/base", "cmd": ["true"]}).status_code == 200,
                     30, "room for an exec again")
    wait_for(lambda: not execs(docker_client, "early", server), 30, "no exec's container left")


def test_a_killed_servers_exec_is_removed_at_the_next_start(start_server, data, policy_file, docker_client):
    key = add_tenant("killed", data, policy_file, "--image", "runner/base")
    server = start_server("--data", str(data))

    def run():
        with server.client(key) as c:
            try:
                c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "600"]})
            except httpx.HTTPError:  # the server dies under it
                pass
    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: execs(docker_client, "killed", server), 30, "the exec's container")
    server.proc.kill()
    server.proc.wait()
    t.join(60)
    assert execs(docker_client, "killed", server)  # left by the dead server until one starts again
    start_server("--data", str(data))
    assert execs(docker_client, "killed", server) == []
