"""The conformance battery (executors/conformance.py): every Executor backend must pass all of it,
against the real thing. One test per check and backend; a third-party backend runs the same
checks with executors.conformance.run()."""
from __future__ import annotations

import pytest

from executors import conformance


@pytest.mark.parametrize("check", list(conformance.CHECKS))
def test_check(sandbox, check):
    ex, ws, traits = sandbox
    try:
        conformance.CHECKS[check](ex, ws, traits)
    except conformance.Skip as e:
        pytest.skip(str(e))


def test_run_reports_each_check(tmp_path):
    """run() answers every check by name: None when it passed, why when it was skipped or failed."""
    from executors.local import LocalExecutor

    with LocalExecutor(tmp_path) as ex:
        report = conformance.run(ex, str(tmp_path), only=["exit_code_is_the_commands",
                                                          "an_unknown_user_is_told_even_when_the_engine_says_nothing"])
        assert report == {"exit_code_is_the_commands": None,
                          "an_unknown_user_is_told_even_when_the_engine_says_nothing":
                              "skipped: this backend runs every command as its own user (it refuses any other)"}
        (tmp_path / "afile").write_text("")  # a "workspace" below a file: nothing can be made there
        report = conformance.run(ex, str(tmp_path / "afile" / "ws"), only=["cwd_absolute_and_relative"])
        assert report["cwd_absolute_and_relative"].startswith("AssertionError")


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


def test_output_nobody_reads_waits_in_the_pipe_not_in_memory(tmp_path):
    """A process's reader threads hold at most queue_chunks unread chunks; then they wait, and so
    does the producer (its pipe is full): 256 MiB of output never piles up in the controller."""
    import time

    from executors import ExecRequest
    from executors.local import LocalExecutor

    with LocalExecutor(tmp_path) as ex:
        proc = ex.spawn(ExecRequest(argv=["head", "-c", str(256 * 1024 * 1024), "/dev/zero"]))
        try:
            deadline = time.monotonic() + 60
            while proc._q.qsize() < 64 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # a reader that did not wait would have queued far more by now
            assert proc._q.qsize() == 64
        finally:
            proc.kill()
            for _ in proc.output():
                pass
            proc.wait(timeout=10)
