"""The conformance battery: every Executor backend must pass all of it, against the real thing."""
from __future__ import annotations

import hashlib
import os
import random
import tracemalloc

import pytest

from executors.models import ExecRequest


def sh(ex, script: str, **kw):
    return ex.exec(ExecRequest(argv=["sh", "-c", script], **kw))


@pytest.mark.parametrize("code", [0, 1, 3, 255])
def test_exit_code_is_the_commands(sandbox, code):
    ex, _ = sandbox
    assert sh(ex, f"exit {code}").exit_code == code


def test_stdout_and_stderr_stay_separate(sandbox):
    ex, _ = sandbox
    res = sh(ex, "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert res.stdout == b"out1\nout2\n"
    assert res.stderr == b"err1\nerr2\n"


def test_stdin_is_passed_through_and_closed(sandbox):
    ex, _ = sandbox
    data = random.Random(1).randbytes(5 * 1024 * 1024) + b"\x00end"
    res = ex.exec(ExecRequest(argv=["sha256sum"], stdin=data))
    assert res.exit_code == 0
    assert res.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_no_stdin_means_eof(sandbox):
    ex, _ = sandbox
    res = ex.exec(ExecRequest(argv=["cat"], timeout=20))
    assert (res.exit_code, res.stdout, res.timed_out) == (0, b"", False)


def test_env_is_set_and_host_env_does_not_leak(sandbox, monkeypatch):
    ex, _ = sandbox
    monkeypatch.setenv("RUNNER_TEST_HOST_SECRET", "s3cret")
    res = ex.exec(ExecRequest(argv=["env"], env={"FOO": "bar baz", "EMPTY": ""}))
    lines = res.stdout.decode().splitlines()
    assert "FOO=bar baz" in lines and "EMPTY=" in lines
    assert not any("RUNNER_TEST_HOST_SECRET" in line or "s3cret" in line for line in lines)


def test_cwd_absolute_and_relative(sandbox):
    ex, ws = sandbox
    assert sh(ex, "mkdir -p sub/deeper", cwd=ws).exit_code == 0
    assert sh(ex, "pwd", cwd=f"{ws}/sub").stdout.decode().strip() == f"{ws}/sub"
    assert sh(ex, "pwd", cwd="sub/deeper").stdout.decode().strip() == f"{ws}/sub/deeper"


def test_command_not_found_is_127(sandbox):
    ex, _ = sandbox
    res = ex.exec(ExecRequest(argv=["no-such-command-xyz"]))
    assert res.exit_code == 127
    assert res.stderr  # says why


def test_killed_by_signal_is_128_plus_n_and_not_oom(sandbox):
    ex, _ = sandbox
    res = sh(ex, "kill -9 $$")
    assert res.exit_code == 137
    assert not res.oom_killed and not res.timed_out


def test_timeout_kills_grandchildren(sandbox):
    ex, _ = sandbox
    marker = f"61.{random.randrange(10**6)}"
    res = sh(ex, f"sleep {marker} & (sleep {marker} &) ; sleep {marker}; echo never", timeout=1)
    assert res.timed_out and res.exit_code == 124
    assert b"never" not in res.stdout
    assert res.duration < 30
    left = ex.exec(ExecRequest(argv=["ps", "-eo", "args"])).stdout.decode()
    assert f"sleep {marker}" not in left


def test_output_streams_as_it_comes(sandbox):
    """The command waits for a file that the callback creates on seeing the first line: it can
    only finish if the first line reached us while it was still running."""
    ex, ws = sandbox
    seen = []

    def on_output(stream, data):
        seen.append((stream, data))
        if b"first" in data and not any(b"go" == d for _, d in seen):
            ex.put_file(f"{ws}/go", b"go")

    res = ex.exec(ExecRequest(argv=["sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"],
                              cwd=ws, timeout=60), on_output=on_output)
    assert res.exit_code == 0 and not res.timed_out
    assert b"".join(d for s, d in seen if s == "stdout") == b"first\nsecond\n"
    assert res.stdout == b""  # streamed, not kept


def test_50mb_of_output_streams_with_bounded_memory(sandbox):
    ex, _ = sandbox
    total = 0

    def count(stream, data):
        nonlocal total
        total += len(data)

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        res = ex.exec(ExecRequest(argv=["head", "-c", str(50 * 1024 * 1024), "/dev/zero"], timeout=120), on_output=count)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.exit_code == 0
    assert total == 50 * 1024 * 1024
    assert peak < 16 * 1024 * 1024, f"peak Python memory {peak / 2**20:.1f} MiB while streaming 50 MiB"


def test_unicode_and_binary_output_arrive_byte_exact(sandbox):
    ex, _ = sandbox
    res = sh(ex, r"printf 'h\303\251llo \342\202\254\n\377\000\001'")
    assert res.stdout == "héllo €\n".encode() + b"\xff\x00\x01"


def test_files_in_and_out(sandbox):
    ex, ws = sandbox
    blob = random.Random(2).randbytes(300_000) + bytes(range(256))
    ex.put_file(f"{ws}/in/deep/blob.bin", blob, mode=0o750)
    assert ex.get_file(f"{ws}/in/deep/blob.bin") == blob
    assert sh(ex, f"stat -c %a {ws}/in/deep/blob.bin").stdout.strip() == b"750"
    assert sh(ex, f"sha256sum {ws}/in/deep/blob.bin").stdout.split()[0].decode() == hashlib.sha256(blob).hexdigest()
    sh(ex, f"printf made-inside > {ws}/out.txt")
    assert ex.get_file(f"{ws}/out.txt") == b"made-inside"
    with pytest.raises(FileNotFoundError):
        ex.get_file(f"{ws}/does-not-exist")


def test_usable_after_a_timeout(sandbox):
    ex, _ = sandbox
    assert sh(ex, "sleep 30", timeout=0.5).timed_out
    assert sh(ex, "echo alive").stdout == b"alive\n"
