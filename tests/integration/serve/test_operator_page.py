"""The operator page, /ui (issue 50), in a real headless Chromium against a real server: it
loads, shows a tenant and a session the test made, and updates by itself when a call is made;
what it shows is text, never markup a tenant chose; its data answers only to the operator
token. The screenshot is kept under the test's tmp directory (its path is printed)."""
from __future__ import annotations

import secrets

import httpx
import pytest

from .chromium import Chromium
from .conftest import add_tenant, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

TEXT = "document.body ? document.body.innerText : ''"


def test_the_operator_page_shows_tenants_sessions_and_calls_live(start_server, data, policy_file, tmp_path):
    token = "op-" + secrets.token_hex(16)
    key = add_tenant("uiten", data, policy_file, "--max-sessions", "7")
    server = start_server("--data", str(data), env={"RUNNER_OPERATOR_TOKEN": token})
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        browser = Chromium(str(tmp_path / "profile"))
        try:
            browser.open(f"{server.url}/ui#token={token}")
            wait_for(lambda: sid in browser.evaluate(TEXT), 60, "the page shows the session")
            text = browser.evaluate(TEXT)
            assert "uiten" in text and "no call since the server started" in text, text
            row = browser.evaluate("[...document.querySelectorAll('#tenants tbody td')].map(td => td.textContent)")
            assert row[:3] == ["uiten", "1", "7"], row  # its open sessions and its maximum
            assert "token" not in browser.evaluate("location.href")  # taken out of the address

            assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "true"}}).status_code == 200
            hostile = "<img src=x onerror=document.title='owned'>"
            assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": hostile, "args": {}}).status_code == 200
            # the same page, not reloaded: it polls
            wait_for(lambda: "c2" in browser.evaluate("document.querySelector('#errors').innerText"), 60,
                     "the page shows the new calls")
            calls = browser.evaluate("[...document.querySelectorAll('#calls tbody tr')].map(tr => tr.innerText)")
            assert len(calls) == 2 and "c1" in calls[1] and "bash" in calls[1] and "ok" in calls[1], calls
            sessions = browser.evaluate("[...document.querySelectorAll('#sessions tbody td')].map(td => td.textContent)")
            assert sessions[0] == sid and sessions[7] == "2" and sessions[8] == "c2", sessions
            assert hostile in browser.evaluate("document.querySelector('#errors').innerText")  # as text
            assert browser.evaluate("document.querySelectorAll('img').length") == 0
            assert browser.evaluate("document.title") != "owned"
            shot = tmp_path / "operator-page.png"
            browser.screenshot(shot)
            print(f"\noperator page screenshot: {shot}")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        finally:
            browser.close()
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def test_the_pages_data_answers_only_to_the_operator_token(start_server, data, policy_file):
    token = "op-" + secrets.token_hex(16)
    key = add_tenant("peek", data, policy_file)
    server = start_server("--data", str(data), env={"RUNNER_OPERATOR_TOKEN": token})
    page = httpx.get(f"{server.url}/ui")
    assert page.status_code == 200 and "peek" not in page.text  # the page itself holds no data
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for headers in ({}, {"Authorization": f"Bearer {key}"}, {"Authorization": "Bearer wrong"}):
        r = httpx.get(f"{server.url}/ui/state", headers=headers)  # loopback is not enough here
        assert r.status_code == 401 and "operator" in r.json()["detail"], r.text
    r = httpx.get(f"{server.url}/ui/state", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and [t["name"] for t in r.json()["tenants"]] == ["peek"]
    assert httpx.get(f"{server.url}/ui/assets/../operator-token").status_code == 404
    assert httpx.get(f"{server.url}/ui/assets/index.html").status_code == 404
