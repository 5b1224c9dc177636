"""The agent's own temp dir, temp files and `which` (runner/agent/fsutil.py), held to what
tempfile and shutil do, which the agent no longer imports."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

from runner.agent import fsutil


@pytest.fixture
def fresh_tempdir(monkeypatch):
    monkeypatch.setattr(fsutil, "_tempdir", None)
    monkeypatch.setattr(tempfile, "tempdir", None)
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_tempdir_is_tempfiles_choice(fresh_tempdir, tmp_path):
    assert fsutil.tempdir() == tempfile.gettempdir()
    fresh_tempdir.setattr(fsutil, "_tempdir", None)
    fresh_tempdir.setattr(tempfile, "tempdir", None)
    fresh_tempdir.setenv("TMPDIR", str(tmp_path))
    assert fsutil.tempdir() == tempfile.gettempdir() == str(tmp_path)
    assert os.listdir(tmp_path) == []  # the probe's file is gone


def test_tempdir_skips_a_directory_where_no_file_can_be_made(fresh_tempdir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    fresh_tempdir.setenv("TMPDIR", str(locked / "missing"))  # (root may write anywhere: a missing dir)
    fresh_tempdir.setenv("TEMP", str(tmp_path))
    assert fsutil.tempdir() == tempfile.gettempdir() == str(tmp_path)


def test_mkstemp_makes_a_new_private_file_and_never_follows_a_link(tmp_path, monkeypatch):
    fd, path = fsutil.mkstemp(str(tmp_path), prefix=".runner-", suffix=".tmp")
    try:
        st = os.fstat(fd)
        assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o600
        assert os.path.basename(path).startswith(".runner-") and path.endswith(".tmp")
        assert os.path.samestat(st, os.stat(path))
    finally:
        os.close(fd)
    os.unlink(path)
    os.symlink(tmp_path / "target", path)  # a planted link of the very name it draws first
    names = iter([os.path.basename(path), "second"])
    monkeypatch.setattr(fsutil, "_random_name", lambda prefix, suffix: next(names))
    fd, got = fsutil.mkstemp(str(tmp_path))
    os.close(fd)
    assert got == str(tmp_path / "second") and os.path.islink(path)
    assert not (tmp_path / "target").exists()  # the link was never followed


def test_unnamed_file_has_no_name(tmp_path):
    fd = fsutil.unnamed_file(str(tmp_path))
    try:
        assert os.fstat(fd).st_nlink == 0
        os.write(fd, b"x")
        assert os.pread(fd, 1, 0) == b"x"
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_unnamed_file_can_never_be_given_a_name(tmp_path):
    """O_EXCL with O_TMPFILE, as tempfile.TemporaryFile: no linkat through /proc/PID/fd, which a
    process of the sandbox could do to the zygote's scratch file (the zygote is dumpable)."""
    fd = fsutil.unnamed_file(str(tmp_path))
    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY)  # a dir_fd makes os.link a linkat(AT_SYMLINK_FOLLOW)
    try:
        with pytest.raises(FileNotFoundError):
            os.link(f"/proc/self/fd/{fd}", tmp_path / "named", src_dir_fd=root, follow_symlinks=True)
    finally:
        os.close(fd)
        os.close(root)
    assert os.listdir(tmp_path) == []


def test_tempdir_without_a_working_directory(fresh_tempdir, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    fresh_tempdir.chdir(gone)
    gone.rmdir()
    fresh_tempdir.setenv("TMPDIR", str(tmp_path))
    assert fsutil.tempdir() == str(tmp_path)


def test_which_is_shutils(monkeypatch, tmp_path):
    for name in ("bash", "sh", "no-such-program-here"):
        assert fsutil.which(name) == shutil.which(name)
    plain = tmp_path / "plain"
    plain.write_text("")
    runnable = tmp_path / "bin"
    runnable.mkdir()
    (runnable / "plain").write_text("#!/bin/sh\n")
    (runnable / "plain").chmod(0o755)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "plain").mkdir(mode=0o755)  # a directory of that name is no program
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "dir"), str(runnable)]))
    assert fsutil.which("plain") == shutil.which("plain") == str(runnable / "plain")
    monkeypatch.chdir(runnable)  # an empty PATH names no directory, not the working one
    monkeypatch.setenv("PATH", "")
    assert fsutil.which("plain") is shutil.which("plain") is None
