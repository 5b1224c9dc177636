"""The battery, continued: what inspect_ai's sandbox contract asks of every backend. Typed file
errors naming the path, a bounded get_file, a command that never started told apart from one
that exited 126/127, an output cap, and an async path that does not block the event loop and
kills the command when cancelled."""
from __future__ import annotations

import asyncio
import random
import tracemalloc

import pytest

from executors.errors import ExecCancelled, FileTooLarge
from executors.models import ExecRequest


def sh(ex, script: str, **kw):
    return ex.exec(ExecRequest(argv=["sh", "-c", script], **kw))


def is_root(ex) -> bool:
    return sh(ex, "id -u").stdout.strip() == b"0"


def test_get_file_errors_are_typed_and_name_the_path(sandbox):
    ex, ws = sandbox
    assert sh(ex, f"mkdir -p {ws}/adir && mkfifo {ws}/fifo").exit_code == 0
    with pytest.raises(FileNotFoundError, match="no-such-file"):
        ex.get_file(f"{ws}/no-such-file")
    with pytest.raises(IsADirectoryError, match="adir"):
        ex.get_file(f"{ws}/adir")
    with pytest.raises(OSError, match="fifo") as e:  # a FIFO is refused, not read (it would block)
        ex.get_file(f"{ws}/fifo")
    assert not isinstance(e.value, FileNotFoundError)


def test_get_file_unreadable_is_permission_error(sandbox):
    ex, ws = sandbox
    if is_root(ex):
        pytest.skip("this backend's user is root, who reads any file")
    assert sh(ex, f"printf secret > {ws}/locked && chmod 000 {ws}/locked").exit_code == 0
    with pytest.raises(PermissionError, match="locked"):
        ex.get_file(f"{ws}/locked")


def test_put_file_errors_are_typed_and_name_the_path(sandbox):
    ex, ws = sandbox
    assert sh(ex, f"mkdir -p {ws}/adir && printf x > {ws}/afile").exit_code == 0
    with pytest.raises(IsADirectoryError, match="adir"):
        ex.put_file(f"{ws}/adir", b"data")
    with pytest.raises(NotADirectoryError, match="afile"):
        ex.put_file(f"{ws}/afile/below", b"data")
    if not is_root(ex):
        assert sh(ex, f"printf keep > {ws}/ro && chmod 444 {ws}/ro && mkdir {ws}/rodir && chmod 555 {ws}/rodir").exit_code == 0
        with pytest.raises(PermissionError, match="ro"):
            ex.put_file(f"{ws}/ro", b"overwritten")
        with pytest.raises(PermissionError, match="rodir"):
            ex.put_file(f"{ws}/rodir/new", b"data")
        assert ex.get_file(f"{ws}/ro") == b"keep"


def test_put_file_keeps_an_existing_files_mode(sandbox):
    ex, ws = sandbox
    assert sh(ex, f"printf old > {ws}/tool && chmod 750 {ws}/tool").exit_code == 0
    ex.put_file(f"{ws}/tool", b"new")
    ex.put_file(f"{ws}/fresh", b"new")
    modes = sh(ex, f"stat -c %a {ws}/tool {ws}/fresh").stdout.split()
    assert modes == [b"750", b"644"]
    assert ex.get_file(f"{ws}/tool") == b"new"
    ex.put_file(f"{ws}/tool", b"newer", mode=0o700)  # an explicit mode is applied
    assert sh(ex, f"stat -c %a {ws}/tool").stdout.strip() == b"700"


def test_get_file_refuses_a_file_over_its_bound_without_reading_it(sandbox):
    ex, ws = sandbox
    assert sh(ex, f"truncate -s 1G {ws}/huge && printf 12345 > {ws}/small").exit_code == 0
    tracemalloc.start()
    try:
        with pytest.raises(FileTooLarge, match="huge") as e:
            ex.get_file(f"{ws}/huge", max_size=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.limit == 1024 * 1024
    assert peak < 8 * 1024 * 1024, f"peak Python memory {peak / 2**20:.1f} MiB refusing a 1 GiB file"
    assert ex.get_file(f"{ws}/small", max_size=5) == b"12345"
    with pytest.raises(FileTooLarge):
        ex.get_file(f"{ws}/small", max_size=4)
    with pytest.raises(FileTooLarge):  # the default bound holds too
        ex.get_file(f"{ws}/huge")


@pytest.mark.parametrize("case", ["not-found", "not-executable", "is-directory", "no-cwd"])
def test_a_command_that_never_started_says_so(sandbox, request, case):
    ex, ws = sandbox
    if case == "no-cwd" and "per-call" in request.node.callspec.id:
        pytest.skip("the engine creates a missing working directory for a new container")
    assert sh(ex, f"printf 'echo hi' > {ws}/plain.txt && mkdir -p {ws}/adir").exit_code == 0
    argv, cwd, word = {
        "not-found": (["no-such-command-xyz"], None, "no-such-command-xyz"),
        "not-executable": ([f"{ws}/plain.txt"], None, "plain.txt"),
        "is-directory": ([f"{ws}/adir"], None, "adir"),
        "no-cwd": (["pwd"], f"{ws}/no-such-dir", "no-such-dir"),
    }[case]
    res = ex.exec(ExecRequest(argv=argv, cwd=cwd))
    assert res.start_failure is not None and res.start_failure.reason == case
    assert res.exit_code == (127 if case == "not-found" else 126)
    assert word in res.start_failure.message and res.stderr.decode().startswith("runner: ")


def test_a_command_that_ran_and_exited_126_or_127_is_its_own_result(sandbox):
    ex, _ = sandbox
    for code in (126, 127):
        res = sh(ex, f"echo mine >&2; exit {code}")
        assert (res.exit_code, res.start_failure, res.stderr) == (code, None, b"mine\n")
    res = sh(ex, "no-such-command-inside")  # the shell started; what it ran did not
    assert res.exit_code == 127 and res.start_failure is None and b"no-such-command-inside" in res.stderr


def test_a_backend_that_cannot_switch_users_refuses_to(sandbox, request):
    """Asked for another user, it must not run the command as its own (root, here)."""
    from executors.errors import InvalidConfig

    ex, _ = sandbox
    if request.node.callspec.id.startswith(("docker", "swarm")):
        pytest.skip("docker (and swarm, through docker exec) runs a command as any user of the image")
    with pytest.raises(InvalidConfig, match="nobody"):
        ex.exec(ExecRequest(argv=["id", "-u"], user="nobody"))
    me = sh(ex, "id -un").stdout.decode().strip()
    assert ex.exec(ExecRequest(argv=["id", "-un"], user=me)).stdout.decode().strip() == me


def test_an_unknown_user_is_told_even_when_the_engine_says_nothing(sandbox, request):
    ex, _ = sandbox
    if not request.node.callspec.id.startswith(("docker", "swarm")):
        pytest.skip("this backend runs every command as its own user (it refuses any other)")
    res = ex.exec(ExecRequest(argv=["id"], user="nosuchuser"))
    assert res.start_failure is not None and res.start_failure.reason == "unknown-user"
    assert b"nosuchuser" in res.stderr and res.exit_code == 126
    res = ex.exec(ExecRequest(argv=["id"], user="1000:nosuchgroup"))
    assert res.start_failure is not None and res.start_failure.reason == "unknown-group"
    assert b"nosuchgroup" in res.stderr
    res = ex.exec(ExecRequest(argv=["id", "-u"], user="1000:1000"))
    assert (res.exit_code, res.stdout, res.start_failure) == (0, b"1000\n", None)


def test_output_over_the_cap_kills_the_command_and_keeps_the_head(sandbox):
    ex, _ = sandbox
    res = ex.exec(ExecRequest(argv=["yes", "line"], max_output=100_000, timeout=120))
    assert res.output_limited and not res.timed_out
    assert len(res.stdout) == 100_000 and res.stdout.startswith(b"line\nline\n")
    seen = []
    res = ex.exec(ExecRequest(argv=["yes"], max_output=50_000, timeout=120), on_output=lambda s, d: seen.append(d))
    assert res.output_limited and sum(map(len, seen)) == 50_000
    res = sh(ex, "printf 12345", max_output=5)
    assert (res.stdout, res.output_limited, res.exit_code) == (b"12345", False, 0)


def test_a_timeout_fires_while_output_floods(sandbox):
    ex, _ = sandbox
    res = ex.exec(ExecRequest(argv=["yes"], timeout=2), on_output=lambda s, d: None)
    assert res.timed_out and res.exit_code == 124


def test_aexec_does_not_block_the_event_loop(sandbox):
    """Two commands awaited together: the first can end only once the second has run."""
    ex, ws = sandbox
    flag = f"{ws}/flag-{random.randrange(10**9)}"

    async def main():
        waiter = asyncio.ensure_future(ex.aexec(ExecRequest(
            argv=["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done; echo seen"], timeout=60)))
        maker = await ex.aexec(ExecRequest(argv=["touch", flag]))
        return maker, await waiter

    maker, waiter = asyncio.run(main())
    assert maker.exit_code == 0
    assert (waiter.stdout, waiter.timed_out) == (b"seen\n", False)


def test_cancelling_aexec_kills_the_command(sandbox):
    ex, _ = sandbox
    marker = f"71.{random.randrange(10**6)}"

    async def main():
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def on_output(stream, data):
            if b"started" in data:
                loop.call_soon_threadsafe(started.set)

        task = asyncio.ensure_future(ex.aexec(ExecRequest(
            argv=["sh", "-c", f"echo started; sleep {marker} & sleep {marker}; echo never"], timeout=120),
            on_output=on_output))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    left = ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()
    assert f"sleep {marker}" not in left
    with pytest.raises(ExecCancelled):  # the synchronous path: a set event kills too
        import threading

        ev = threading.Event()
        ev.set()
        ex.exec(ExecRequest(argv=["sleep", marker]), cancel=ev)
    assert f"sleep {marker}" not in ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()


def test_the_local_backend_never_follows_a_symlink_it_is_handed(tmp_path):
    """The local backend's files are this machine's: a link planted at the path must not send a
    read or a write elsewhere (the docker and ssh backends resolve paths inside the sandbox)."""
    import os

    from executors.local import LocalExecutor

    outside = tmp_path / "outside"
    outside.write_bytes(b"precious")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / "link")
    ex = LocalExecutor(ws)
    with pytest.raises(OSError, match="link"):
        ex.get_file("link")
    with pytest.raises(OSError, match="link"):
        ex.put_file("link", b"overwritten")
    assert outside.read_bytes() == b"precious"
