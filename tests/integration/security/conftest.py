"""Hostile-input suite: every case runs against the real docker executor, and every case checks
that nothing outside the sandbox changed: a canary directory outside the workspace, the
protected directories inside it, and the host's /tmp."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from runner import Runner

MARKER = "runner-hostile-marker"


def snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_nlink, digest,
                                             os.readlink(p) if p.is_symlink() else None)
    return out


def host_tmp_markers() -> list[str]:
    return sorted(n for n in os.listdir("/tmp") if MARKER in n)


@pytest.fixture
def hostile(tmp_path, no_leaks, monkeypatch):
    """(runner, workspace, outside) with a canary outside the workspace and protected dirs inside."""
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\necho original hook\n")
    (ws / "protected").mkdir()
    (ws / "protected" / "keep.txt").write_text("keep me\n")
    (ws / "notes.txt").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    for dirpath, dirnames, filenames in os.walk(ws):  # the sandbox runs as the workspace's owner
        for name in [".", *dirnames, *filenames]:
            os.chown(Path(dirpath, name), 1000, 1000)
    monkeypatch.setenv("RUNNER_TEST_HOST_SECRET", "hunter2-host-only")
    watched = {"outside": outside, "hooks": ws / ".git" / "hooks", "protected": ws / "protected"}
    before = {k: snapshot(v) for k, v in watched.items()}
    tmp_before = host_tmp_markers()
    r = Runner(executor="docker", workspace=ws, preset="all", protect=["protected"],
               overrides={"limits.memory": "256m", "limits.pids": 128, "limits.tmpfs": "16m",
                          "limits.workspace": "64m", "limits.max_write": "2m", "limits.timeout": 30})
    with r:
        yield r, ws, outside
    after = {k: snapshot(v) for k, v in watched.items()}
    for k in watched:
        assert after[k] == before[k], f"{k} changed from inside the sandbox"
    assert host_tmp_markers() == tmp_before, "something appeared in the host's /tmp"


def err(res) -> str:
    assert res.is_error, f"expected an error, got: {res.text[:500]}"
    return res.text
