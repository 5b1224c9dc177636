"""The official e2b SDK against `runner serve`'s /e2b: sandboxes, commands, files, pty, tenants
apart, secure sandboxes' token, the tenant's policy, timeouts."""
from __future__ import annotations

import time

import httpx
import pytest

from .conftest import NO_BASH, add_tenant, e2b_containers, write_policy


def test_create_run_kill(as_tenant, docker_client):
    from e2b import Sandbox

    sbx = Sandbox.create("base")
    assert len(e2b_containers(docker_client, sbx.sandbox_id)) == 1
    r = sbx.commands.run("echo out; echo err >&2; whoami; pwd; echo $HOME")
    assert r.exit_code == 0
    assert r.stdout == "out\nuser\n/home/user\n/home/user\n"
    assert r.stderr == "err\n"
    assert sbx.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
    assert sbx.is_running()
    sbx.kill()
    assert e2b_containers(docker_client, sbx.sandbox_id) == []
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]


def test_exit_code_and_env(as_tenant):
    from e2b import CommandExitException, Sandbox

    sbx = Sandbox.create("base", envs={"FROM_CREATE": "a"})
    try:
        with pytest.raises(CommandExitException) as e:
            sbx.commands.run("echo $FROM_CREATE $FROM_RUN; exit 3", envs={"FROM_RUN": "b"})
        assert e.value.exit_code == 3
        assert e.value.stdout == "a b\n"
    finally:
        sbx.kill()


def test_background_stdin_list_kill(as_tenant):
    from e2b import CommandExitException, Sandbox

    sbx = Sandbox.create("base")
    try:
        h = sbx.commands.run("cat", background=True, stdin=True)
        assert h.pid in [p.pid for p in sbx.commands.list()]
        sbx.commands.send_stdin(h.pid, "hello\n")
        sbx.commands.close_stdin(h.pid)
        assert h.wait().stdout == "hello\n"
        h2 = sbx.commands.run("sleep 600", background=True)
        assert sbx.commands.kill(h2.pid)
        with pytest.raises(CommandExitException):
            h2.wait()
        assert h2.pid not in [p.pid for p in sbx.commands.list()]
    finally:
        sbx.kill()


def test_files(as_tenant):
    from e2b import NotFoundException, Sandbox

    sbx = Sandbox.create("base")
    try:
        sbx.files.write("dir/a.txt", "alpha")
        assert sbx.files.read("/home/user/dir/a.txt") == "alpha"
        assert [e.name for e in sbx.files.list("dir")] == ["a.txt"]
        sbx.files.rename("dir/a.txt", "dir/b.txt")
        assert not sbx.files.exists("dir/a.txt") and sbx.files.exists("dir/b.txt")
        assert sbx.files.make_dir("dir/sub") is True
        assert sbx.files.make_dir("dir/sub") is False
        sbx.files.remove("dir/b.txt")
        with pytest.raises(NotFoundException):
            sbx.files.read("dir/b.txt")
        assert sbx.commands.run("ls dir").stdout == "sub\n"  # the same files the commands see
    finally:
        sbx.kill()


def test_pty(as_tenant):
    from e2b import Sandbox
    from e2b.sandbox.commands.command_handle import PtySize

    sbx = Sandbox.create("base")
    try:
        out = bytearray()
        h = sbx.pty.create(PtySize(rows=24, cols=80))
        sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(h.pid, b"stty size; exit\n")
        h.wait(on_pty=lambda d: out.extend(d))
        assert b"30 100" in bytes(out)
    finally:
        sbx.kill()


def test_another_tenants_sandbox_is_not_found(e2b_server, as_tenant):
    from e2b import NotFoundException, Sandbox

    url, _alice, bob, _ = e2b_server
    sbx = Sandbox.create("base")
    try:
        with pytest.raises(NotFoundException):
            Sandbox.get_info(sbx.sandbox_id, api_key=bob)
        assert Sandbox.kill(sbx.sandbox_id, api_key=bob) is False
        with pytest.raises(NotFoundException):
            Sandbox.connect(sbx.sandbox_id, api_key=bob)
        assert Sandbox.list(api_key=bob).next_items() == []
        assert sbx.commands.run("echo still").stdout == "still\n"
    finally:
        sbx.kill()


def test_secure_sandbox_needs_its_token(as_tenant):
    from e2b import Sandbox

    url = as_tenant[0]
    sbx = Sandbox.create("base", secure=True)
    try:
        bare = httpx.get(url + "/health", headers={"E2b-Sandbox-Id": sbx.sandbox_id})
        assert bare.status_code == 401
        wrong = httpx.get(url + "/health", headers={"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": "x" * 32})
        assert wrong.status_code == 401
        ok = httpx.get(url + "/health", headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                                 "X-Access-Token": sbx._envd_access_token})
        assert ok.status_code == 204
        assert sbx.commands.run("echo ok").stdout == "ok\n"  # the SDK sends it
        unknown = httpx.get(url + "/health", headers={"E2b-Sandbox-Id": "i" + "0" * 20})
        assert unknown.status_code == 502  # what E2B's proxy answers for a sandbox not there
    finally:
        sbx.kill()


def test_unknown_key_is_refused(as_tenant):
    from e2b import AuthenticationException, Sandbox

    with pytest.raises(AuthenticationException):
        Sandbox.create("base", api_key="e2b_" + "00" * 20)


def test_root_is_refused(as_tenant):
    from e2b import Sandbox, SandboxException

    sbx = Sandbox.create("base")
    try:
        with pytest.raises(SandboxException):
            sbx.commands.run("id -u", user="root")
    finally:
        sbx.kill()


def test_policy_refusal_reaches_the_sdk(tmp_path, start_server, monkeypatch):
    from e2b import Sandbox, SandboxException

    from runner.servers.e2b.app import e2b_key

    data = tmp_path / "d"
    data.mkdir()
    key = e2b_key(add_tenant("carol", data, write_policy(tmp_path, NO_BASH, "nobash")))
    url = start_server("--data", str(data)).url + "/e2b"
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    sbx = Sandbox.create("base", api_key=key)
    try:
        with pytest.raises(SandboxException) as e:
            sbx.commands.run("echo hi")
        assert "bash" in str(e.value)
    finally:
        sbx.kill()


def test_timeout_removes_the_sandbox(as_tenant, docker_client):
    from e2b import Sandbox

    sbx = Sandbox.create("base", timeout=1)
    deadline = time.monotonic() + 60
    while e2b_containers(docker_client, sbx.sandbox_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert e2b_containers(docker_client, sbx.sandbox_id) == []
    assert not Sandbox.list().next_items()


AUDITED = """\
extends: default
name: audited
sandbox: {{lifecycle: per-session, pool_size: 0}}
audit: {{path: {path}}}
"""


def test_output_is_redacted_and_operations_audited(tmp_path, start_server, monkeypatch):
    import json

    from e2b import Sandbox

    from runner.servers.e2b.app import e2b_key

    data = tmp_path / "d"
    data.mkdir()
    log = tmp_path / "audit.jsonl"
    key = e2b_key(add_tenant("dave", data, write_policy(tmp_path, AUDITED.format(path=log), "audited")))
    url = start_server("--data", str(data)).url + "/e2b"
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    sbx = Sandbox.create("base", api_key=key)
    try:  # a token the command assembles, so it is in the output only
        out = sbx.commands.run("printf 'token=ghp_%s\\n' $(printf 'a%.0s' $(seq 36))").stdout
        assert out == "token=[REDACTED:github-token]\n"
        # a byte that is not UTF-8 in the same chunk kept it unredacted once (the chunk went out as it came)
        out = sbx.commands.run("printf '\\377 token=ghp_%s\\n' $(printf 'a%.0s' $(seq 36))").stdout
        assert "ghp_" + "a" * 36 not in out and "[REDACTED:github-token]" in out, out
        sbx.files.write("f.txt", "x")
    finally:
        sbx.kill()
    tools = [(r.get("tool"), r.get("tenant"), r.get("session")) for r in map(json.loads, log.read_text().splitlines())]
    for op in ("e2b.create", "e2b.process.start", "e2b.files.write", "e2b.kill"):
        assert (op, "dave", sbx.sandbox_id) in tools, tools


def test_signed_urls_and_file_metadata(as_tenant):
    from e2b import Sandbox

    sbx = Sandbox.create("base", secure=True)
    try:
        info = sbx.files.write("m.txt", "signed", metadata={"Author": "ann"})
        assert info.metadata == {"author": "ann"} and sbx.files.get_info("m.txt").metadata == {"author": "ann"}
        assert sbx.files.write("m.txt", "again").metadata is None  # a write without metadata clears it
        url = sbx.download_url("m.txt", "user")
        assert "signature=" in url
        assert httpx.get(url).text == "again"
        forged = url.replace("signature=v1_", "signature=v1_A")
        assert httpx.get(forged).status_code == 401
        expired = sbx.download_url("m.txt", "user", use_signature_expiration=-60)
        assert httpx.get(expired).json() == {"code": 401, "message": "signature is already expired"}
        other = Sandbox.create("base", secure=True)  # the signature names the sandbox whose token made it
        try:
            other.files.write("m.txt", "other's")
            assert httpx.get(other.download_url("m.txt", "user")).text == "other's"
            assert httpx.get(url).text == "again"
        finally:
            other.kill()
    finally:
        sbx.kill()


def test_a_restart_after_kill_9_removes_what_the_dead_server_left(tmp_path, start_server, docker_client, monkeypatch):
    import signal

    from e2b import Sandbox

    from runner.servers.e2b.app import e2b_key

    from .conftest import POLICY

    data = tmp_path / "d"
    data.mkdir()
    key = e2b_key(add_tenant("erin", data, write_policy(tmp_path, POLICY, "e2btiny")))
    first = start_server("--data", str(data))
    url = first.url + "/e2b"
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    sbx = Sandbox.create("base", api_key=key)
    sbx.files.write("left.txt", "x")
    assert e2b_containers(docker_client, sbx.sandbox_id) and list((data / "e2b" / "erin").iterdir())
    first.stop(signal.SIGKILL)
    start_server("--data", str(data))
    assert e2b_containers(docker_client, sbx.sandbox_id) == []
    assert list((data / "e2b" / "erin").iterdir()) == []


def test_metrics_of_many_sandboxes_are_the_tenants_own(e2b_server, as_tenant):
    """GET /sandboxes/metrics?sandbox_ids=A,B (before /sandboxes/{id}, which took "metrics" for an
    id and answered 404): a tenant's sandboxes' metrics, another tenant's left out; the disk used
    is the home's, walked with no link followed."""
    import httpx
    from e2b import Sandbox

    url, alice, bob, _ = e2b_server
    sbx = Sandbox.create("base")
    try:
        sbx.commands.run("head -c 200000 /dev/urandom > blob; ln -s /etc/passwd link")
        for key, mine in ((alice, True), (bob, False)):
            r = httpx.get(f"{url}/sandboxes/metrics", params={"sandbox_ids": sbx.sandbox_id},
                          headers={"X-API-Key": key}, timeout=60)
            assert r.status_code == 200, r.text
            got = r.json()["sandboxes"]
            assert (sbx.sandbox_id in got) is mine, got
            if mine:
                assert got[sbx.sandbox_id]["diskUsed"] >= 200000
    finally:
        sbx.kill()
