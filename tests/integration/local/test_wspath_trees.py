"""wspath.walk, usage and remove_tree on real trees a sandbox could leave: deeper than Python's
recursion limit and than PATH_MAX, links out of the tree, hard links, thousands of directories,
a filesystem mounted inside (issue 43: shutil.rmtree raised RecursionError on a deep tree, and
the quota counted only regular files' sizes)."""
from __future__ import annotations

import os
import subprocess

import pytest

from runner.policy.protect import Guard, ProtectedPath
from runner.untrusted.wspath import BLOCK, remove_tree, usage, walk

NAME = "n" * 50  # 3000 levels of it are 153,000 characters of path: past PATH_MAX as well


def deep(root, levels: int, name: str = NAME) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "wb") as f:
            f.write(b"b" * 10_000)
    finally:
        os.close(fd)


@pytest.fixture(autouse=True)
def tidy(tmp_path):
    """Whatever a test leaves goes by remove_tree: pytest's own clean-up (shutil.rmtree) raises
    RecursionError on these trees and would end the run of whoever cleans the base temp next."""
    yield
    for p in tmp_path.iterdir():
        remove_tree(p)


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "keep").write_bytes(b"k" * 100_000)
    return d


def test_a_tree_past_the_recursion_limit_and_path_max_is_walked_and_removed(tmp_path, outside):
    root = tmp_path / "ws"
    root.mkdir()
    deep(root, 3000)
    (root / "out").symlink_to(outside)
    seen = list(walk(root))
    assert len(seen) == 3000 + 1 + 1  # the directories, the file at the bottom, the link
    assert max(len(rel) for rel, _, _ in seen) > 4096
    u = usage(root)
    assert u.complete and u.entries == 3002 and u.used >= 3002 * BLOCK
    assert remove_tree(root) is None
    assert not root.exists()
    assert (outside / "keep").stat().st_size == 100_000  # the link went, not what it names


def test_every_entry_counts_and_a_hard_link_counts_once(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(3000):
        (root / f"d{i}").mkdir()
    assert usage(root).used >= 3000 * BLOCK  # 3000 directories counted as 0
    (root / "big").write_bytes(b"x" * 1_000_000)
    os.link(root / "big", root / "again")
    os.symlink("big", root / "link")
    os.mkfifo(root / "fifo")
    u = usage(root)
    assert u.entries == 3004 and 4_000_000 > u.used - 3000 * BLOCK >= 1_000_000 + 2 * BLOCK


def test_usage_stops_past_its_bound(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(1000):
        (root / f"f{i}").touch()
    u = usage(root, stop_after=10 * BLOCK)
    assert not u.complete and u.entries == 11 and u.used == 11 * BLOCK


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a filesystem needs root")
def test_a_filesystem_mounted_inside_is_neither_entered_nor_removed_and_it_is_said(tmp_path):
    root = tmp_path / "ws"
    (root / "a" / "m").mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "runner-test", str(root / "a" / "m")], check=True)
    try:
        (root / "a" / "m" / "inside").write_text("mounted")
        assert sorted(name for _, name, _ in walk(root)) == ["a", "f", "m"]
        skipped = []
        list(walk(root, skipped=lambda path, why: skipped.append(path)))
        assert skipped == ["a/m"]
        assert not usage(root).complete  # what it holds is not counted: the measure says so
        why = remove_tree(root)
        assert why and "not wholly removed" in why and "m" in why
        assert (root / "a" / "m" / "inside").read_text() == "mounted"
        assert not (root / "a" / "f").exists()
    finally:
        subprocess.run(["umount", str(root / "a" / "m")], check=True)
    assert remove_tree(root) is None and not root.exists()


def test_remove_tree_takes_a_link_or_a_file_as_itself(tmp_path, outside):
    link = tmp_path / "link"
    link.symlink_to(outside)
    assert remove_tree(link) is None
    assert not link.is_symlink() and (outside / "keep").exists()
    assert remove_tree(tmp_path / "missing") is None


def test_a_hard_link_deep_in_a_protected_directory_is_found(tmp_path):
    """The hard-link check walks protected directories with wspath.walk: at any depth."""
    ws = tmp_path / "ws"
    (ws / "keep").mkdir(parents=True)
    deep(ws / "keep", 1500, "k")
    bottom = ws / "keep" / "/".join(["k"] * 1500) / "bottom"
    os.link(bottom, ws / "alias")
    with pytest.raises(ProtectedPath):
        Guard(ws, ["keep"]).check_writable(ws / "alias")


def test_a_wide_protected_directory_holds_no_descriptor_per_directory(tmp_path):
    """The hard-link check held one open descriptor per directory waiting its turn: 2000 sibling
    directories under a protected one, with few descriptors left, hid the link (each directory it
    could not open was skipped) and starved the rest of the process of descriptors."""
    import resource

    ws = tmp_path / "ws"
    for i in range(2000):
        (ws / "keep" / f"d{i}").mkdir(parents=True)
    for i in range(0, 2000, 7):
        (ws / "keep" / f"d{i}" / "x").write_text("x")
    os.link(ws / "keep" / "d1001" / "x", ws / "alias")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 32, hard))
    try:
        with pytest.raises(ProtectedPath):
            Guard(ws, ["keep"]).check_writable(ws / "alias")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_listing_tools_answer_on_a_tree_past_the_recursion_limit(tmp_path):
    """glob, find, grep and memory_search walked with os.walk, which recurses on Python 3.11: a
    tree 1100 levels deep made each of them a RecursionError."""
    from runner import Runner

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    deep(ws, 1100, "d")
    deep(ws / "memory", 1100, "m")
    bottom = ws / "memory" / "/".join(["m"] * 1100) / "bottom"
    bottom.rename(bottom.with_name("deep.md"))
    bottom.with_name("deep.md").write_text("a note kept far down\n")
    with Runner(executor="local", workspace=ws, preset="all") as r:
        for tool, args, want in (("glob", {"pattern": "**/bottom"}, "bottom"), ("find", {"pattern": "bottom"}, "bottom"),
                                 ("grep", {"pattern": "bbbb", "path": "d"}, "bottom"),
                                 ("memory_search", {"query": "note kept far down"}, "deep.md")):
            res = r.call(tool, args)
            assert not res.is_error and want in res.text, (tool, res.text[:300])
