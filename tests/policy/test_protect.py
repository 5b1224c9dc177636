"""Protected directories: the list, the read-only mounts, and the path checks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.policy import Policy
from runner.policy.protect import (BadProtectPath, Guard, ProtectedPath, check_writable, policy_protected_dirs,
                                   protected_dirs, readonly_mounts)


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
    assert dirs == [".git/hooks", "secrets", "a/b", "cli", "env1", "env2/x"]
    assert protected_dirs([], environ={}, git_hooks=False) == []


def test_policy_helper(ws):
    p = Policy.model_validate({"protect": ["secrets"], "protect_git_hooks": False})
    assert policy_protected_dirs(p, ["x"], {}) == ["secrets", "x"]


def test_absolute_only_inside_workspace(ws):
    assert protected_dirs([], [str(ws / "secrets")], {}, workspace=ws) == [".git/hooks", "secrets"]
    for bad in ("/etc", "../x", str(ws), ""):
        with pytest.raises(BadProtectPath):
            protected_dirs([], [bad], {}, workspace=ws)
    with pytest.raises(BadProtectPath, match="absolute"):
        protected_dirs([], ["/etc"], {})


def test_readonly_mounts(ws):
    plan = readonly_mounts(ws, "/workspace", [".git/hooks", "secrets", "secrets/inner", "nothere"])
    assert sorted((m.rel, m.container) for m in plan.mounts) == [(".git/hooks", "/workspace/.git/hooks"),
                                                                ("secrets", "/workspace/secrets")]
    assert {m.host for m in plan.mounts} == {str((ws / ".git" / "hooks").resolve()), str((ws / "secrets").resolve())}
    assert plan.missing == ["nothere"]  # secrets/inner is covered by the secrets mount
    assert plan.outside == []


def test_nested_protected_dir_needs_no_mount(ws):
    (ws / "secrets" / "inner").mkdir()
    plan = readonly_mounts(ws, "/workspace", ["secrets/inner", "secrets"])
    assert [m.rel for m in plan.mounts] == ["secrets"]


def test_symlinked_protected_dir_protects_its_target(ws, tmp_path):
    (ws / "real").mkdir()
    (ws / "link").symlink_to("real")
    (ws / "out").symlink_to(tmp_path)
    plan = readonly_mounts(ws, "/workspace", ["link", "out"])
    assert [(m.rel, m.container) for m in plan.mounts] == [("link", "/workspace/real")]
    assert plan.outside == ["out"]


def test_to_mount_is_read_only(ws):
    m = readonly_mounts(ws, "/workspace", ["secrets"]).mounts[0].to_mount()
    assert m.read_only and m.target == "/workspace/secrets" and m.source == str((ws / "secrets").resolve())


def test_check_writable_plain(ws):
    g = Guard(ws, [".git/hooks", "secrets"])
    g.check_writable("src/a.py")
    g.check_writable(ws / "new.txt")
    g.check_writable(".git/config")  # only hooks are protected
    with pytest.raises(ProtectedPath, match=r"^path is in a protected directory: \.git/hooks/pre-commit$"):
        g.check_writable(".git/hooks/pre-commit")
    for p in (".git/hooks", ".git/hooks/new-hook", "secrets/k", str(ws / "secrets" / "deep" / "x"),
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


def test_module_function(ws):
    check_writable("src/a.py", ws, ["secrets"])
    with pytest.raises(ProtectedPath):
        check_writable("secrets/k", ws, ["secrets"])
