"""PostgreSQL by URL: two `runner serve` instances share tenants, sessions, keys and quotas."""
from __future__ import annotations

import os

import pytest

from .conftest import add_tenant, fresh_minute, session_containers, tenants, wait_for
from .pg import Postgres

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def pg():
    server = Postgres().start()
    with open(f"{server.dir}/data/postmaster.pid") as f:
        postmaster = int(f.readline())
    yield server
    server.stop()
    assert server.proc.poll() is not None
    assert not os.path.exists(f"/proc/{postmaster}"), "the stop left postgres running"


def test_two_instances_share_state_through_postgresql(pg, start_server, data, policy_file, docker_client):
    key = add_tenant("shared", None, policy_file, "--calls-per-minute", "4", db=pg.url)
    a = start_server("--db", pg.url, "--data", str(data))
    b = start_server("--db", pg.url, "--data", str(data))
    with a.client(key) as ca, b.client(key) as cb:
        assert ca.get("/v1/health").json()["database"] == "postgresql"
        sid = ca.post("/v1/sessions", json={}).json()["id"]
        assert [s["id"] for s in cb.get("/v1/sessions").json()["sessions"]] == [sid]
        assert ca.put(f"/v1/sessions/{sid}/files/a.txt", content=b"from a\n").status_code == 204
        r = ca.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "cat a.txt"}})
        assert r.json()["content"] == "from a\n"
        # b takes the session over; a lets its sandbox go
        r = cb.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo b >> a.txt; cat a.txt"}})
        assert r.status_code == 200 and r.json()["content"] == "from a\nb\n", r.text
        wait_for(lambda: {c["Labels"]["runner.owner.pid"] for c in session_containers(docker_client, sid)}
                 == {str(b.proc.pid)}, 60, "a's sandbox of the session removed")
        # the calls-per-minute quota (4) is one, whichever instance counts: six calls in one minute,
        # alternating, get at most four 200s, then 429s
        fresh_minute()
        codes = [(ca, cb)[i % 2].post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code
                 for i in range(6)]
        first = codes.index(429)
        assert set(codes[:first]) <= {200} and set(codes[first:]) == {429} and first <= 4, codes
        # a session deleted on one is gone on the other, with its sandbox
        assert ca.delete(f"/v1/sessions/{sid}").status_code == 204
        assert cb.get(f"/v1/sessions/{sid}").status_code == 410
        wait_for(lambda: not session_containers(docker_client, sid), 60, "b's sandbox removed")
        # a new key works on both at once, the old one on neither
        new = tenants("key", "shared", db=pg.url).strip()
        assert ca.get("/v1/sessions").status_code == 401 and cb.get("/v1/sessions").status_code == 401
        for s in (a, b):
            with s.client(new) as c:
                assert c.get("/v1/sessions").status_code == 200
    a.stop()
    b.stop()
