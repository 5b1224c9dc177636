"""Snapshots' archives on the controller (runner/controller/snapshots.py): packed byte for byte
without following a link, and unpacked from hostile archives without leaving the target."""
from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from runner.controller import snapshots as S


def manifest(root: Path) -> dict:
    """Every entry under root: kind, mode, content hash or link target, and which entries share an inode."""
    out, inodes = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif not stat.S_ISREG(st.st_mode):
                out[rel] = ("other",)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest(),
                            int(st.st_mtime))
                inodes.setdefault(st.st_ino, []).append(rel)
    return {"entries": out, "linked": sorted(sorted(v) for v in inodes.values() if len(v) > 1)}


def build(ws: Path) -> None:
    (ws / "empty" / "deeper").mkdir(parents=True)
    (ws / "sub").mkdir()
    (ws / "sub" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (ws / "sub" / "text.txt").write_text("héllo\n")
    os.chmod(ws / "sub" / "text.txt", 0o640)
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws / "run.sh", 0o755)
    os.link(ws / "sub" / "text.txt", ws / "hard.txt")
    os.symlink("/etc/passwd", ws / "abs-link")
    os.symlink("sub/text.txt", ws / "rel-link")
    os.symlink("nowhere/at/all", ws / "dangling")
    (ws / "ro").mkdir()
    (ws / "ro" / "f").write_text("x")
    os.chmod(ws / "ro", 0o555)
    os.mkfifo(ws / "fifo")  # left out: a snapshot holds no FIFO


def test_pack_and_unpack_restore_the_tree_byte_for_byte(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    build(src)
    size = S.pack(src, tmp_path / "ws.tar")
    assert size >= 3 * 1024 * 1024
    S.unpack(tmp_path / "ws.tar", dst)
    want = manifest(src)
    del want["entries"]["fifo"]
    got = manifest(dst)
    assert got == want
    assert got["linked"] == [["hard.txt", "sub/text.txt"]]
    assert os.readlink(dst / "abs-link") == "/etc/passwd"  # kept as text, never followed


def test_pack_never_reads_through_a_link(tmp_path):
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "key").write_text("TOPSECRET")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(secret, ws / "dir-link")
    os.symlink(secret / "key", ws / "file-link")
    S.pack(ws, tmp_path / "ws.tar")
    assert b"TOPSECRET" not in (tmp_path / "ws.tar").read_bytes()
    with tarfile.open(tmp_path / "ws.tar") as t:
        assert {m.name: m.type for m in t} == {"dir-link": tarfile.SYMTYPE, "file-link": tarfile.SYMTYPE}


def test_unpack_refuses_a_directory_that_is_not_empty(tmp_path):
    (tmp_path / "src").mkdir()
    S.pack(tmp_path / "src", tmp_path / "a.tar")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "x").write_text("")
    with pytest.raises(S.SnapshotError, match="not empty"):
        S.unpack(tmp_path / "a.tar", tmp_path / "dst")


def hostile(path: Path, entries: list) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, extra in entries:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            if kind == tarfile.REGTYPE:
                data = extra if isinstance(extra, bytes) else b"pwned"
                ti.size = len(data)
                ti.mode = 0o6755 if extra == "setuid" else 0o644
                t.addfile(ti, io.BytesIO(data))
            else:
                ti.linkname = extra or ""
                t.addfile(ti)


@pytest.mark.parametrize("entries", [
    [("../escaped", tarfile.REGTYPE, None)],
    [("/tmp/escaped-abs", tarfile.REGTYPE, None)],
    [("a/../../escaped", tarfile.REGTYPE, None)],
    # a link the archive made, then an entry through it
    [("out", tarfile.SYMTYPE, "{outside}"), ("out/escaped", tarfile.REGTYPE, None)],
    [("out", tarfile.SYMTYPE, "{outside}/escaped"), ("out", tarfile.REGTYPE, None)],
    # a hard link to a file outside, or to one the archive never made
    [("h", tarfile.LNKTYPE, "{outside}/victim")],
    [("h", tarfile.LNKTYPE, "../outside/victim")],
    [("h", tarfile.LNKTYPE, "not-made")],
    [("l", tarfile.SYMTYPE, "{outside}/victim"), ("h", tarfile.LNKTYPE, "l")],
    [("dev", tarfile.CHRTYPE, None)],
    [("fifo", tarfile.FIFOTYPE, None)],
], ids=["dotdot", "absolute", "inner-dotdot", "through-symlink-dir", "over-symlink", "hardlink-abs",
        "hardlink-dotdot", "hardlink-unmade", "hardlink-to-symlink", "device", "fifo"])
def test_a_hostile_archive_leaves_nothing_outside_the_target(tmp_path, entries):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("original")
    entries = [(n, k, e.replace("{outside}", str(outside)) if isinstance(e, str) else e) for n, k, e in entries]
    hostile(tmp_path / "evil.tar", entries)
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(S.SnapshotError):
        S.unpack(tmp_path / "evil.tar", target)
    assert sorted(os.listdir(outside)) == ["victim"]
    assert (outside / "victim").read_text() == "original"
    assert os.stat(outside / "victim").st_nlink == 1
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped-abs").exists()


def test_set_id_bits_are_dropped(tmp_path):
    hostile(tmp_path / "a.tar", [("suid", tarfile.REGTYPE, "setuid")])
    (tmp_path / "t").mkdir()
    S.unpack(tmp_path / "a.tar", tmp_path / "t")
    assert stat.S_IMODE(os.stat(tmp_path / "t" / "suid").st_mode) == 0o755


def test_store_lists_removes_and_refuses_past_its_quota(tmp_path):
    store = S.Store(tmp_path, "acme", S.Quota(count=2, bytes=0))
    for _ in range(2):
        sid, d = store.new_dir()
        (d / S.META).write_text(f'{{"id": "{sid}", "created": 1, "size": 10}}')
    listed = store.list()
    assert len(listed) == 2 and all(m["age"] > 0 for m in listed)
    with pytest.raises(S.OverQuota) as e:
        store.check_quota()
    assert e.value.status == 429
    store.quota = S.Quota(count=0, bytes=20)
    with pytest.raises(S.OverQuota) as e:
        store.check_quota()
    assert e.value.status == 413
    store.remove(listed[0]["id"])
    assert [m["id"] for m in store.list()] == [listed[1]["id"]]
    other = S.Store(tmp_path, "other")
    with pytest.raises(S.NoSnapshot):
        other.meta(listed[1]["id"])  # another tenant's does not exist for it
    for bad in ("../acme/" + listed[1]["id"], "snap-../../x", "", "x" * 100):
        with pytest.raises(S.NoSnapshot):
            store.path(bad)


def test_gc_sweeps_unfinished_snapshots_only(tmp_path):
    store = S.Store(tmp_path, "acme")
    done, d1 = store.new_dir()
    (d1 / S.META).write_text('{"id": "x", "created": 1}')
    _, d2 = store.new_dir()  # a writer killed before its metadata
    (d2 / S.WORKSPACE_TAR).write_bytes(b"half")
    _, d3 = store.new_dir()  # one being written now
    old = os.stat(d3).st_mtime - 2 * S.UNFINISHED_AGE
    for d in (d1, d2):
        os.utime(d, (old, old))
    assert S.sweep(dry_run=True, data=tmp_path) == [(str(d2), "snapshot", S.sweep(True, tmp_path)[0][2])]
    assert d2.exists()
    rows = S.sweep(data=tmp_path)
    assert [r[0] for r in rows] == [str(d2)]
    assert not d2.exists() and d1.exists() and d3.exists()
