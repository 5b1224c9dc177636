"""The two native options the dialects needed and no body had: read's raw text (with the file's
size and what was read) and write's overwrite=false (never replaces an existing file). Local and
docker give the same answers."""
from __future__ import annotations

import pytest

from runner import Runner


@pytest.fixture(params=["local", "docker"])
def runner(request, tmp_path):
    if request.param == "docker":
        request.getfixturevalue("no_leaks")
    ws = tmp_path / "ws"
    ws.mkdir()
    with Runner(executor=request.param, workspace=ws, preset="all") as r:
        yield r


def test_read_raw_is_the_text_as_it_is(runner):
    ws = runner.workspace
    (ws / "crlf.txt").write_bytes(b"\xef\xbb\xbfa\r\nb")
    res = runner.call("read", {"path": "crlf.txt", "raw": True})
    assert res.content == "\ufeffa\r\nb" and (res.meta["bytes"], res.meta["read_bytes"], res.meta["truncated"]) == (
        7, 7, False)
    (ws / "big.txt").write_text("x" * 60_000)
    res = runner.call("read", {"path": "big.txt", "raw": True, "max_bytes": 100_000})
    assert len(res.content) == 51_200 and res.meta["truncated"] is True and res.meta["bytes"] == 60_000
    res = runner.call("read", {"path": "big.txt", "raw": True, "maxBytes": 3})
    assert res.content == "xxx" and res.meta["read_bytes"] == 3
    (ws / "empty.txt").write_text("")
    assert runner.call("read", {"path": "empty.txt", "raw": True}).content == ""
    (ws / "bin").write_bytes(b"\x00\x01")
    assert "binary file" in runner.call("read", {"path": "bin", "raw": True}).content
    assert runner.call("read", {"path": "crlf.txt"}).content == "     1\ta\n     2\tb"  # without raw: as before


def test_write_overwrite_false_never_replaces(runner):
    ws = runner.workspace
    (ws / "keep.txt").write_text("original")
    res = runner.call("write", {"path": "keep.txt", "content": "new", "overwrite": False})
    assert res.is_error and "exists and overwrite is false" in res.content
    assert (ws / "keep.txt").read_text() == "original"
    assert [p.name for p in ws.iterdir() if p.name.startswith(".runner-")] == []  # no temp file left
    res = runner.call("write", {"path": "d/new.txt", "content": "new", "overwrite": False})
    assert not res.is_error and (ws / "d" / "new.txt").read_text() == "new"
    assert res.meta["bytes"] == 3 and res.meta["path"] == "d/new.txt"
    res = runner.call("write", {"path": "keep.txt", "content": "replaced"})  # the default replaces, as before
    assert not res.is_error and (ws / "keep.txt").read_text() == "replaced"
