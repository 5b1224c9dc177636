"""Disk full in the workspace (a small tmpfs mounted as the workspace) during write, edit and
apply_patch: a tool error, every original file intact, no partial or temporary file left."""
from __future__ import annotations

import os
import subprocess

import pytest

from runner import Runner

pytestmark = pytest.mark.docker

SIZE = 1024 * 1024
ROOM = 64 * 1024  # left free once the filler is written
BIG = "x" * (4 * ROOM)  # does not fit


@pytest.fixture
def small_ws(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0777", "runner-faults-test-ws", str(ws)],
                   check=True)
    try:
        (ws / "a.txt").write_text("alpha\nbeta\n")
        (ws / "b.txt").write_text("one\ntwo\n")
        st = os.statvfs(ws)
        with open(ws / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - ROOM))
        yield ws
    finally:
        subprocess.run(["umount", str(ws)], check=True)


def _state(ws) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in ws.iterdir() if p.name != "filler"}


def _check(res, ws, before):
    assert res.is_error, res.text
    assert "No space left on device" in res.text, res.text
    assert _state(ws) == before  # originals intact; nothing new, no .runner-*.tmp


CASES = {
    "write": ("write", {"path": "a.txt", "content": BIG}),
    "write-new": ("write", {"path": "new.txt", "content": BIG}),
    "write-new-dir": ("write", {"path": "d/new.txt", "content": BIG}),
    "edit": ("edit", {"path": "a.txt", "old_string": "beta", "new_string": BIG}),
    # The first file fits, the second does not: the patch must not be half applied.
    "apply_patch": ("apply_patch", {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n"
                                             "*** Update File: b.txt\n@@\n one\n-two\n+" + BIG + "\n"
                                             "*** End Patch\n"}),
    "apply_patch-add": ("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: b.txt\n*** Add File: c.txt\n+"
                                                 + BIG + "\n*** End Patch\n"}),
}


@pytest.mark.parametrize("case", CASES)
def test_disk_full_is_a_tool_error_and_changes_nothing(small_ws, no_leaks, case):
    tool, args = CASES[case]
    before = _state(small_ws)
    with Runner(workspace=small_ws, lifecycle="per-session") as r:
        res = r.call(tool, args)
        _check(res, small_ws, before)
        ok = r.call("write", {"path": "after.txt", "content": "fits\n"})  # the sandbox goes on
        assert not ok.is_error, ok.text
