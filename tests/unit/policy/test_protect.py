"""Protected directories: the list, the read-only mounts, and the path checks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.policy import Policy
from runner.policy.protect import (GIT_PROTECTED, BadProtectPath, Guard, ProtectedPath, check_writable,
                                   mount_plan, policy_protected_dirs, protected_dirs)
from runner.untrusted.wspath import UnsafePath


@pytest.fixture
def ws(tmp_path) -> Path:
    w = tmp_path / "ws"
    (w / ".git" / "hooks").mkdir(parents=True)
    (w / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (w / "src").mkdir()
    (w / "src" / "a.py").write_text("x = 1\n")
    (w / "secrets").mkdir()
    (w / "secrets" / "k").write_text("k\n")
    return w


def test_sources_in_order_without_duplicates(ws):
    dirs = protected_dirs(["secrets", "./a//b/"], ["cli", "secrets"], {"RUNNER_PROTECT_DIRS": "env1::env2/x:cli"})
    assert dirs == [*GIT_PROTECTED, "secrets", "a/b", "cli", "env1", "env2/x"]
    assert protected_dirs([], environ={}, git_hooks=False) == []


def test_policy_helper(ws):
    p = Policy.model_validate({"protect": ["secrets"], "protect_git_hooks": False})
    assert policy_protected_dirs(p, ["x"], {}) == ["secrets", "x"]


def test_absolute_only_inside_workspace(ws):
    assert protected_dirs([], [str(ws / "secrets")], {}, workspace=ws) == [*GIT_PROTECTED, "secrets"]
    for bad in ("/etc", "../x", str(ws), ""):
        with pytest.raises(BadProtectPath):
            protected_dirs([], [bad], {}, workspace=ws)
    with pytest.raises(BadProtectPath, match="absolute"):
        protected_dirs([], ["/etc"], {})


def test_mount_plan(ws):
    plan = mount_plan(ws, "/workspace", [".git/hooks", "secrets", "secrets/inner", "nothere"])
    assert [(m.rel, m.container, m.read_only) for m in plan.mounts] == [
        (".git", "/workspace/.git", False), ("secrets", "/workspace/secrets", True),
        (".git/hooks", "/workspace/.git/hooks", True)]
    assert {m.host for m in plan.mounts} == {str(ws / ".git"), str(ws / ".git" / "hooks"), str(ws / "secrets")}
    assert plan.missing == ["nothere"]  # secrets/inner is covered by the secrets mount
    assert plan.created == []


def test_nested_protected_dir_needs_no_mount(ws):
    (ws / "secrets" / "inner").mkdir()
    plan = mount_plan(ws, "/workspace", ["secrets/inner", "secrets"])
    assert [m.rel for m in plan.mounts] == ["secrets"]


def test_ancestors_are_pinned_and_missing_ones_made(ws):
    plan = mount_plan(ws, "/workspace", ["src/deep/config"], create=["src/deep/config"], owner=(os.getuid(), os.getgid()))
    assert plan.created == ["src/deep", "src/deep/config"] and (ws / "src" / "deep" / "config").is_dir()
    assert [(m.rel, m.read_only) for m in plan.mounts] == [("src", False), ("src/deep", False),
                                                           ("src/deep/config", True)]
    assert all(not m.read_only for m in mount_plan(ws, "/w", [], pin=["src/deep"]).mounts)
    assert all(m.read_only for m in mount_plan(ws, "/w", [], pin=["src/deep"], pins_read_only=True).mounts)


def test_a_file_on_the_way_is_mounted_read_only_itself(tmp_path):
    (tmp_path / ".git").write_text("gitdir: /elsewhere/.git/worktrees/w\n")  # a linked worktree
    plan = mount_plan(tmp_path, "/workspace", [".git/hooks", ".git/config"])
    assert [(m.rel, m.read_only) for m in plan.mounts] == [(".git", True)]


def test_links_are_refused_never_followed(ws, tmp_path):
    (ws / "real").mkdir()
    (ws / "link").symlink_to("real")
    (ws / "out").symlink_to(tmp_path)
    (ws / "loop").symlink_to("loop")
    for rel, says in (("link", "link is a symbolic link"), ("out/x", "out is a symbolic link"), ("loop/x", "loop")):
        with pytest.raises(UnsafePath, match=says):
            mount_plan(ws, "/workspace", [rel], create=[rel])
    with pytest.raises(UnsafePath, match="mount source link: link is a symbolic link"):
        mount_plan(ws, "/workspace", [], pin=["link"])
    assert not (tmp_path / "x").exists()


def test_to_mount_is_read_only_and_not_scanned(ws):
    from runner.backends.docker import protected_mount

    m = protected_mount(mount_plan(ws, "/workspace", ["secrets"]).mounts[0])
    assert m.read_only and m.target == "/workspace/secrets" and m.source == str(ws / "secrets") and not m.scan


def test_check_writable_plain(ws):
    g = Guard(ws, [*GIT_PROTECTED, "secrets"])
    g.check_writable("src/a.py")
    g.check_writable(ws / "new.txt")
    g.check_writable(".git/description")  # only what makes git run programs is protected
    with pytest.raises(ProtectedPath, match=r"^path is in a protected directory: \.git/hooks/pre-commit$"):
        g.check_writable(".git/hooks/pre-commit")
    for p in (".git/hooks", ".git/hooks/new-hook", ".git/config", ".git/commondir", "secrets/k", str(ws / "secrets" / "deep" / "x"),
              "src/../secrets/k", "./secrets//k"):
        with pytest.raises(ProtectedPath):
            g.check_writable(p)
    assert not g.is_writable("secrets/k") and g.is_writable("src/a.py")


def test_check_writable_missing_protected_dir(tmp_path):
    g = Guard(tmp_path, [".git/hooks"])  # no .git at all
    with pytest.raises(ProtectedPath):
        g.check_writable(".git/hooks/post-checkout")


def test_symlink_into_protected_dir_is_refused(ws):
    (ws / "src" / "innocent").symlink_to(ws / ".git" / "hooks" / "pre-commit")
    (ws / "hooks-dir").symlink_to(ws / ".git" / "hooks")
    (ws / "dangling").symlink_to(ws / "secrets" / "not-yet")
    g = Guard(ws, [".git/hooks", "secrets"])
    for p in ("src/innocent", "hooks-dir/post-merge", "dangling"):
        with pytest.raises(ProtectedPath):
            g.check_writable(p)


def test_symlink_chain_and_relative_link(ws):
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to(".git/hooks")
    with pytest.raises(ProtectedPath):
        Guard(ws, [".git/hooks"]).check_writable("a/pre-push")


def test_protected_dir_that_is_itself_a_symlink(ws):
    (ws / "realcfg").mkdir()
    (ws / "cfg").symlink_to("realcfg")
    g = Guard(ws, ["cfg"])
    for p in ("cfg/x", "realcfg/x"):
        with pytest.raises(ProtectedPath):
            g.check_writable(p)


def test_hardlink_to_protected_file_is_refused(ws):
    os.link(ws / ".git" / "hooks" / "pre-commit", ws / "src" / "looks-harmless")
    with pytest.raises(ProtectedPath, match=r"\.git/hooks/pre-commit"):
        Guard(ws, [".git/hooks"]).check_writable("src/looks-harmless")
    os.link(ws / "src" / "a.py", ws / "src" / "a2.py")  # a hard link elsewhere is fine
    Guard(ws, [".git/hooks"]).check_writable("src/a2.py")


def test_the_hard_link_check_never_leaves_the_workspace(ws, tmp_path, monkeypatch):
    """The sandbox links a protected directory missing at the start to a host directory, and a
    file to a host file: the check stats no host file and walks no host directory (it walked
    `/` from `.runner/tools -> /`, and its refusal named a host file linked to the target)."""
    host = tmp_path / "host"
    (host / "sub" / "deeper").mkdir(parents=True)
    (host / "a.txt").write_text("host\n")
    os.link(host / "a.txt", host / "sub" / "deeper" / "name-the-sandbox-cannot-know")
    (ws / ".runner").mkdir()
    (ws / ".runner" / "tools").symlink_to(host / "sub")
    (ws / "x").symlink_to(host / "a.txt")
    (ws / "y").write_text("y\n")
    os.link(ws / "y", ws / "y2")
    g = Guard(ws, [".runner/tools", ".git/hooks"])
    walked = []
    real = os.scandir

    def scandir(fd):
        walked.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "scandir", scandir)
    g.check_writable("x")  # a host file: not the check's to stat (the tool refuses it as outside)
    g.check_writable("y")  # linked within the workspace, to nothing protected
    assert walked and all(w.startswith(str(ws) + "/") for w in walked), walked  # .git/hooks only, never host/sub


def test_the_hard_link_check_is_bounded_in_all(ws, monkeypatch):
    """Directories count against the bound, across every protected directory, and the walk
    stops there (it counted files only, per directory, and went on walking)."""
    from runner.policy import protect

    for i in range(30):
        (ws / ".git" / "hooks" / f"d{i}" / "e").mkdir(parents=True)
        (ws / "secrets" / f"d{i}").mkdir(parents=True)
    os.link(ws / "src" / "a.py", ws / "src" / "a2.py")
    monkeypatch.setattr(protect, "_HARDLINK_SCAN_LIMIT", 20)
    scanned = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda fd: scanned.append(fd) or real(fd))
    Guard(ws, [".git/hooks", "secrets"]).check_writable("src/a2.py")
    assert 0 < len(scanned) <= 21, len(scanned)


def test_module_function(ws):
    check_writable("src/a.py", ws, ["secrets"])
    with pytest.raises(ProtectedPath):
        check_writable("secrets/k", ws, ["secrets"])


@pytest.mark.parametrize("shape", ["loop", "chain", "dangling", "fifo", "socket"])
def test_any_workspace_shape_is_an_answer_never_a_crash(tmp_path, shape):
    import socket

    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    p = ws / "x"
    if shape == "loop":
        p.symlink_to("x")
    elif shape == "chain":
        for i in range(100):
            (ws / f"l{i}").symlink_to(f"l{i + 1}")
        (ws / "l100").symlink_to("secrets/k")
        p.symlink_to("l0")
    elif shape == "dangling":
        p.symlink_to("nowhere/at/all")
    elif shape == "fifo":
        os.mkfifo(p)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    g = Guard(ws, ["secrets"])
    if shape == "chain":
        with pytest.raises(ProtectedPath):
            g.check_writable("x")
    else:
        g.check_writable("x")
        g.check_writable("x/deeper")


def test_a_link_on_the_way_is_named(ws, tmp_path):
    (ws / "out").symlink_to(tmp_path)
    with pytest.raises(UnsafePath, match="protected path out/x goes through out, which is a symbolic link"):
        mount_plan(ws, "/workspace", ["out/x"])
