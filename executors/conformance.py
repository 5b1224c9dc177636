"""The conformance battery every Executor backend must pass, importable by anyone's backend.

    from executors.conformance import Traits, run
    with MyExecutor(...) as ex:
        report = run(ex, "/workspace", Traits())      # {check name: None (passed) | "skipped: …" | failure}
        assert all(v is None or v.startswith("skipped") for v in report.values()), report

Each check is a plain function `check(ex, ws, traits)` against a started executor whose
workspace (a writable, empty directory) is `ws` as the executor sees it; it raises
AssertionError (or any exception) on a failure and `Skip` when it does not apply to this backend.
runner's own backends run it in tests/integration/conformance (local, docker per-session and per-call, ssh),
as inspect_ai ships its sandbox self-check. It needs `sh`, `ps`, `sha256sum`, `head`, `truncate`,
`mkfifo`, `stat`, `yes` and `sleep` in the sandbox (coreutils and procps), and takes about a minute.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
import tracemalloc
from dataclasses import dataclass
from typing import Callable

from .base import Executor
from .errors import ExecCancelled, FileTooLarge, InvalidConfig
from .models import OOM_EXIT, TIMEOUT_EXIT, ExecRequest


@dataclass(frozen=True)
class Traits:
    """What a backend legitimately does differently; the checks adapt to it."""

    switches_users: bool = False  # runs a command as another user when asked (docker), instead of refusing
    creates_missing_cwd: bool = False  # a fresh container per command: the engine makes a missing cwd


class Skip(Exception):
    """This check does not apply to this backend; str() says why."""


Check = Callable[[Executor, str, Traits], None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def run(ex: Executor, ws: str, traits: Traits = Traits(), only: list[str] | None = None) -> dict[str, str | None]:
    """Run the battery (or the checks named in `only`): {name: None | 'skipped: why' | 'Error: message'}."""
    out: dict[str, str | None] = {}
    for name, fn in CHECKS.items():
        if only is not None and name not in only:
            continue
        try:
            fn(ex, ws, traits)
            out[name] = None
        except Skip as e:
            out[name] = f"skipped: {e}"
        except Exception as e:  # a check's failure is its report line
            out[name] = f"{type(e).__name__}: {e}"
    return out


def sh(ex: Executor, script: str, **kw):
    return ex.exec(ExecRequest(argv=["sh", "-c", script], **kw))


def is_root(ex: Executor) -> bool:
    return sh(ex, "id -u").stdout.strip() == b"0"


def raises(exc_type, fn: Callable[[], object], contains: str | None = None):
    """fn() must raise exc_type (whose message holds `contains`); answers the exception."""
    try:
        fn()
    except exc_type as e:
        assert contains is None or contains in str(e), f"{type(e).__name__} {e!s:.200} does not name {contains!r}"
        return e
    raise AssertionError(f"expected {exc_type.__name__}{f' naming {contains!r}' if contains else ''}")


# -- running commands ------------------------------------------------------------------------------
@check
def exit_code_is_the_commands(ex, ws, traits):
    for code in (0, 1, 3, 255):
        assert sh(ex, f"exit {code}").exit_code == code, code


@check
def stdout_and_stderr_stay_separate(ex, ws, traits):
    res = sh(ex, "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert (res.stdout, res.stderr) == (b"out1\nout2\n", b"err1\nerr2\n"), res


@check
def stdin_is_passed_through_and_closed(ex, ws, traits):
    data = random.Random(1).randbytes(5 * 1024 * 1024) + b"\x00end"
    res = ex.exec(ExecRequest(argv=["sha256sum"], stdin=data))
    assert res.exit_code == 0
    assert res.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


@check
def no_stdin_means_eof(ex, ws, traits):
    res = ex.exec(ExecRequest(argv=["cat"], timeout=20))
    assert (res.exit_code, res.stdout, res.timed_out) == (0, b"", False), res


@check
def env_is_set_and_host_env_does_not_leak(ex, ws, traits):
    os.environ["RUNNER_TEST_HOST_SECRET"] = "s3cret"
    try:
        res = ex.exec(ExecRequest(argv=["env"], env={"FOO": "bar baz", "EMPTY": ""}))
    finally:
        del os.environ["RUNNER_TEST_HOST_SECRET"]
    lines = res.stdout.decode().splitlines()
    assert "FOO=bar baz" in lines and "EMPTY=" in lines, lines
    assert not any("RUNNER_TEST_HOST_SECRET" in line or "s3cret" in line for line in lines)


@check
def cwd_absolute_and_relative(ex, ws, traits):
    assert sh(ex, "mkdir -p sub/deeper", cwd=ws).exit_code == 0
    assert sh(ex, "pwd", cwd=f"{ws}/sub").stdout.decode().strip() == f"{ws}/sub"
    assert sh(ex, "pwd", cwd="sub/deeper").stdout.decode().strip() == f"{ws}/sub/deeper"


@check
def command_not_found_is_127(ex, ws, traits):
    res = ex.exec(ExecRequest(argv=["no-such-command-xyz"]))
    assert res.exit_code == 127 and res.stderr, res  # and it says why


@check
def killed_by_signal_is_128_plus_n_and_not_oom(ex, ws, traits):
    res = sh(ex, "kill -9 $$")
    assert res.exit_code == OOM_EXIT and not res.oom_killed and not res.timed_out, res


@check
def timeout_kills_grandchildren(ex, ws, traits):
    marker = f"61.{random.randrange(10**6)}"
    res = sh(ex, f"sleep {marker} & (sleep {marker} &) ; sleep {marker}; echo never", timeout=1)
    assert res.timed_out and res.exit_code == TIMEOUT_EXIT and b"never" not in res.stdout, res
    assert res.duration < 30
    left = ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()
    assert f"sleep {marker}" not in left, left


@check
def output_streams_as_it_comes(ex, ws, traits):
    """The command waits for a file that the callback creates on seeing the first line: it can
    only finish if the first line reached us while it was still running."""
    seen = []

    def on_output(stream, data):
        seen.append((stream, data))
        if b"first" in data and not any(b"go" == d for _, d in seen):
            ex.put_file(f"{ws}/go", b"go")

    res = ex.exec(ExecRequest(argv=["sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"],
                              cwd=ws, timeout=60), on_output=on_output)
    assert res.exit_code == 0 and not res.timed_out, res
    assert b"".join(d for s, d in seen if s == "stdout") == b"first\nsecond\n"
    assert res.stdout == b""  # streamed, not kept


@check
def output_of_50mb_streams_with_bounded_memory(ex, ws, traits):
    total = 0

    def count(stream, data):
        nonlocal total
        total += len(data)

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        res = ex.exec(ExecRequest(argv=["head", "-c", str(50 * 1024 * 1024), "/dev/zero"], timeout=120),
                      on_output=count)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.exit_code == 0 and total == 50 * 1024 * 1024, (res, total)
    assert peak < 16 * 1024 * 1024, f"peak Python memory {peak / 2**20:.1f} MiB while streaming 50 MiB"


@check
def unicode_and_binary_output_arrive_byte_exact(ex, ws, traits):
    res = sh(ex, r"printf 'h\303\251llo \342\202\254\n\377\000\001'")
    assert res.stdout == "héllo €\n".encode() + b"\xff\x00\x01", res.stdout


@check
def usable_after_a_timeout(ex, ws, traits):
    assert sh(ex, "sleep 30", timeout=0.5).timed_out
    assert sh(ex, "echo alive").stdout == b"alive\n"


@check
def output_over_the_cap_kills_the_command_and_keeps_the_head(ex, ws, traits):
    res = ex.exec(ExecRequest(argv=["yes", "line"], max_output=100_000, timeout=120))
    assert res.output_limited and not res.timed_out, res
    assert len(res.stdout) == 100_000 and res.stdout.startswith(b"line\nline\n")
    seen = []
    res = ex.exec(ExecRequest(argv=["yes"], max_output=50_000, timeout=120), on_output=lambda s, d: seen.append(d))
    assert res.output_limited and sum(map(len, seen)) == 50_000, res
    res = sh(ex, "printf 12345", max_output=5)
    assert (res.stdout, res.output_limited, res.exit_code) == (b"12345", False, 0), res


@check
def a_timeout_fires_while_output_floods(ex, ws, traits):
    res = ex.exec(ExecRequest(argv=["yes"], timeout=2), on_output=lambda s, d: None)
    assert res.timed_out and res.exit_code == TIMEOUT_EXIT, res


@check
def a_command_that_never_started_says_so(ex, ws, traits):
    assert sh(ex, f"printf 'echo hi' > {ws}/plain.txt && mkdir -p {ws}/adir").exit_code == 0
    cases = {
        "not-found": (["no-such-command-xyz"], None, "no-such-command-xyz"),
        "not-executable": ([f"{ws}/plain.txt"], None, "plain.txt"),
        "is-directory": ([f"{ws}/adir"], None, "adir"),
        "no-cwd": (["pwd"], f"{ws}/no-such-dir", "no-such-dir"),
    }
    if traits.creates_missing_cwd:
        del cases["no-cwd"]
    for case, (argv, cwd, word) in cases.items():
        res = ex.exec(ExecRequest(argv=argv, cwd=cwd))
        assert res.start_failure is not None and res.start_failure.reason == case, (case, res)
        assert res.exit_code == (127 if case == "not-found" else 126), (case, res)
        assert word in res.start_failure.message and res.stderr.decode().startswith("runner: "), (case, res)


@check
def a_command_that_ran_and_exited_126_or_127_is_its_own_result(ex, ws, traits):
    for code in (126, 127):
        res = sh(ex, f"echo mine >&2; exit {code}")
        assert (res.exit_code, res.start_failure, res.stderr) == (code, None, b"mine\n"), res
    res = sh(ex, "no-such-command-inside")  # the shell started; what it ran did not
    assert res.exit_code == 127 and res.start_failure is None and b"no-such-command-inside" in res.stderr, res


@check
def a_backend_that_cannot_switch_users_refuses_to(ex, ws, traits):
    """Asked for another user, it must not run the command as its own."""
    if traits.switches_users:
        raise Skip("this backend runs a command as any user of its image")
    raises(InvalidConfig, lambda: ex.exec(ExecRequest(argv=["id", "-u"], user="nobody")), "nobody")
    me = sh(ex, "id -un").stdout.decode().strip()
    assert ex.exec(ExecRequest(argv=["id", "-un"], user=me)).stdout.decode().strip() == me


@check
def an_unknown_user_is_told_even_when_the_engine_says_nothing(ex, ws, traits):
    if not traits.switches_users:
        raise Skip("this backend runs every command as its own user (it refuses any other)")
    res = ex.exec(ExecRequest(argv=["id"], user="nosuchuser"))
    assert res.start_failure is not None and res.start_failure.reason == "unknown-user", res
    assert b"nosuchuser" in res.stderr and res.exit_code == 126, res
    res = ex.exec(ExecRequest(argv=["id"], user="1000:nosuchgroup"))
    assert res.start_failure is not None and res.start_failure.reason == "unknown-group", res
    assert b"nosuchgroup" in res.stderr
    res = ex.exec(ExecRequest(argv=["id", "-u"], user="1000:1000"))
    assert (res.exit_code, res.stdout, res.start_failure) == (0, b"1000\n", None), res


# -- files -----------------------------------------------------------------------------------------
@check
def files_in_and_out(ex, ws, traits):
    blob = random.Random(2).randbytes(300_000) + bytes(range(256))
    ex.put_file(f"{ws}/in/deep/blob.bin", blob, mode=0o750)
    assert ex.get_file(f"{ws}/in/deep/blob.bin") == blob
    assert sh(ex, f"stat -c %a {ws}/in/deep/blob.bin").stdout.strip() == b"750"
    assert sh(ex, f"sha256sum {ws}/in/deep/blob.bin").stdout.split()[0].decode() == hashlib.sha256(blob).hexdigest()
    sh(ex, f"printf made-inside > {ws}/out.txt")
    assert ex.get_file(f"{ws}/out.txt") == b"made-inside"
    raises(FileNotFoundError, lambda: ex.get_file(f"{ws}/does-not-exist"))


@check
def get_file_errors_are_typed_and_name_the_path(ex, ws, traits):
    assert sh(ex, f"mkdir -p {ws}/adir && mkfifo {ws}/fifo").exit_code == 0
    raises(FileNotFoundError, lambda: ex.get_file(f"{ws}/no-such-file"), "no-such-file")
    raises(IsADirectoryError, lambda: ex.get_file(f"{ws}/adir"), "adir")
    e = raises(OSError, lambda: ex.get_file(f"{ws}/fifo"), "fifo")  # refused, not read (it would block)
    assert not isinstance(e, FileNotFoundError), e


@check
def get_file_unreadable_is_permission_error(ex, ws, traits):
    if is_root(ex):
        raise Skip("this backend's user is root, who reads any file")
    assert sh(ex, f"printf secret > {ws}/locked && chmod 000 {ws}/locked").exit_code == 0
    raises(PermissionError, lambda: ex.get_file(f"{ws}/locked"), "locked")


@check
def put_file_errors_are_typed_and_name_the_path(ex, ws, traits):
    assert sh(ex, f"mkdir -p {ws}/adir && printf x > {ws}/afile").exit_code == 0
    raises(IsADirectoryError, lambda: ex.put_file(f"{ws}/adir", b"data"), "adir")
    raises(NotADirectoryError, lambda: ex.put_file(f"{ws}/afile/below", b"data"), "afile")
    if not is_root(ex):
        assert sh(ex, f"printf keep > {ws}/ro && chmod 444 {ws}/ro && mkdir {ws}/rodir && chmod 555 {ws}/rodir"
                  ).exit_code == 0
        raises(PermissionError, lambda: ex.put_file(f"{ws}/ro", b"overwritten"), "ro")
        raises(PermissionError, lambda: ex.put_file(f"{ws}/rodir/new", b"data"), "rodir")
        assert ex.get_file(f"{ws}/ro") == b"keep"


@check
def put_file_keeps_an_existing_files_mode(ex, ws, traits):
    assert sh(ex, f"printf old > {ws}/tool && chmod 750 {ws}/tool").exit_code == 0
    ex.put_file(f"{ws}/tool", b"new")
    ex.put_file(f"{ws}/fresh", b"new")
    modes = sh(ex, f"stat -c %a {ws}/tool {ws}/fresh")
    assert modes.stdout.split() == [b"750", b"644"], modes
    assert ex.get_file(f"{ws}/tool") == b"new"
    ex.put_file(f"{ws}/tool", b"newer", mode=0o700)  # an explicit mode is applied
    assert sh(ex, f"stat -c %a {ws}/tool").stdout.strip() == b"700"


@check
def get_file_refuses_a_file_over_its_bound_without_reading_it(ex, ws, traits):
    assert sh(ex, f"truncate -s 1G {ws}/huge && printf 12345 > {ws}/small").exit_code == 0
    tracemalloc.start()
    try:
        e = raises(FileTooLarge, lambda: ex.get_file(f"{ws}/huge", max_size=1024 * 1024), "huge")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.limit == 1024 * 1024
    assert peak < 8 * 1024 * 1024, f"peak Python memory {peak / 2**20:.1f} MiB refusing a 1 GiB file"
    assert ex.get_file(f"{ws}/small", max_size=5) == b"12345"
    raises(FileTooLarge, lambda: ex.get_file(f"{ws}/small", max_size=4))
    raises(FileTooLarge, lambda: ex.get_file(f"{ws}/huge"))  # the default bound holds too


# -- async and cancelling --------------------------------------------------------------------------
@check
def aexec_does_not_block_the_event_loop(ex, ws, traits):
    """Two commands awaited together: the first can end only once the second has run."""
    flag = f"{ws}/flag-{random.randrange(10**9)}"

    async def main():
        waiter = asyncio.ensure_future(ex.aexec(ExecRequest(
            argv=["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done; echo seen"], timeout=60)))
        maker = await ex.aexec(ExecRequest(argv=["touch", flag]))
        return maker, await waiter

    maker, waiter = asyncio.run(main())
    assert maker.exit_code == 0
    assert (waiter.stdout, waiter.timed_out) == (b"seen\n", False), waiter


@check
def cancelling_aexec_kills_the_command(ex, ws, traits):
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
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("a cancelled aexec returned instead of raising CancelledError")

    asyncio.run(main())
    left = ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()
    assert f"sleep {marker}" not in left, left
    ev = threading.Event()  # the synchronous path: a set event kills too
    ev.set()
    raises(ExecCancelled, lambda: ex.exec(ExecRequest(argv=["sleep", marker]), cancel=ev))
    assert f"sleep {marker}" not in ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()
