"""A tenant's bounds on `runner serve` (issue 43): file transfers in flight (each holds memory;
a download is sent in bounded chunks), sessions created and deleted per minute, and ended
sessions' rows purged after their retention. The real server, a real client."""
from __future__ import annotations

import pytest

from .conftest import add_tenant, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_tenants_file_transfers_in_flight_are_bounded_and_a_download_streams(start_server, data, policy_file):
    key = add_tenant("big", data, policy_file)
    server = start_server("--data", str(data), "--max-transfers-per-tenant", "2")
    with server.client(key) as c, server.client(key) as d1, server.client(key) as d2:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "truncate -s 64M big"}})
        assert r.status_code == 200 and not r.json()["is_error"], r.text
        # two downloads of a 64 MiB file held open by clients that do not read: a third is refused
        with d1.stream("GET", f"/v1/sessions/{sid}/files/big") as a, d2.stream("GET", f"/v1/sessions/{sid}/files/big") as b:
            assert a.status_code == b.status_code == 200 and a.headers["content-length"] == str(64 << 20)
            third = c.get(f"/v1/sessions/{sid}/files/big")
            assert third.status_code == 429 and "--max-transfers-per-tenant" in third.text
            assert int(third.headers["retry-after"]) > 0
            assert c.put(f"/v1/sessions/{sid}/files/x", content=b"x").status_code == 429
            assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code == 200  # calls go on
            got = sum(len(chunk) for chunk in a.iter_bytes())
            assert got == 64 << 20
        # both ended (one read whole, one closed unread): the slots are back
        wait_for(lambda: c.put(f"/v1/sessions/{sid}/files/x", content=b"x").status_code == 204, 30, "slots back")
        assert c.get(f"/v1/sessions/{sid}/files/x").content == b"x"
        c.delete(f"/v1/sessions/{sid}")


def test_session_creations_and_deletions_per_minute_are_bounded(start_server, data, policy_file):
    key = add_tenant("churn", data, policy_file)
    server = start_server("--data", str(data), "--max-session-ops-per-minute", "3")
    with server.client(key) as c:
        a = c.post("/v1/sessions", json={})
        b = c.post("/v1/sessions", json={})
        assert a.status_code == b.status_code == 201
        assert c.delete(f"/v1/sessions/{a.json()['id']}").status_code == 204
        over = c.post("/v1/sessions", json={})
        assert over.status_code == 429 and 0 < int(over.headers["retry-after"]) <= 60, over.text
        assert c.delete(f"/v1/sessions/{b.json()['id']}").status_code == 429
        assert [s["id"] for s in c.get("/v1/sessions").json()["sessions"]] == [b.json()["id"]]


def test_ended_sessions_rows_are_purged_after_their_retention(start_server, data, policy_file):
    key = add_tenant("old", data, policy_file)
    server = start_server("--data", str(data), "--session-retention", "1")
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert c.get(f"/v1/sessions/{sid}").status_code in (410, 404)
        wait_for(lambda: c.get(f"/v1/sessions/{sid}").status_code == 404, 30, "the ended session's row purged")
