"""Snapshots of a local-executor session: the workspace alone (no container, so no /tmp of its
own), said in the metadata; pause needs the docker backend and says so."""
from __future__ import annotations

import pytest

from runner import Runner
from runner.controller import snapshots as S


def test_local_snapshot_holds_the_workspace_and_says_what_it_did_not(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_DATA", str(tmp_path / "data"))
    (tmp_path / "ws").mkdir()
    (tmp_path / "new").mkdir()
    with Runner(executor="local", workspace=tmp_path / "ws") as r:
        r.call("write", {"path": "a/b.txt", "content": "local\n"})
        r.call("bash", {"command": "true"})  # (its sandbox started)
        sid = r.snapshot()
        with pytest.raises(S.SnapshotError, match="docker backend"):
            r.pause()
    meta = S.Store().meta(sid)
    assert any(n.startswith("/tmp") for n in meta["not_captured"])
    with Runner(executor="local", workspace=tmp_path / "new", snapshot=sid) as r2:
        assert r2.call("read", {"path": "a/b.txt"}).text.endswith("local")
