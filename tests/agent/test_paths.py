"""Path resolution and the protected-directory checks, called directly."""
from __future__ import annotations

import os

import pytest

from runner.agent import files, paths
from runner.agent.context import ConfigError, Context
from runner.agent.result import ToolError


@pytest.fixture
def ws(tmp_path):
    w = tmp_path / "ws"
    (w / ".git" / "hooks").mkdir(parents=True)
    (w / "src").mkdir()
    (w / "src" / "a.txt").write_text("a\n")
    (tmp_path / "secret.txt").write_text("s\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.txt").write_text("d\n")
    (tmp_path / "rw").mkdir()
    return w


@pytest.fixture
def ctx(ws, tmp_path):
    return Context(str(ws), protected=[str(ws / ".git" / "hooks")],
                   roots=[{"path": str(tmp_path / "data"), "read_only": True},
                          {"path": str(tmp_path / "rw"), "read_only": False}])


def test_relative_at_and_absolute_paths_inside(ctx, ws):
    assert paths.resolve(ctx, "src/a.txt") == str(ws / "src" / "a.txt")
    assert paths.resolve(ctx, "@src/a.txt") == str(ws / "src" / "a.txt")
    assert paths.resolve(ctx, str(ws / "src" / "a.txt")) == str(ws / "src" / "a.txt")
    assert paths.resolve(ctx, "src/../src/a.txt") == str(ws / "src" / "a.txt")
    assert paths.resolve(ctx, "") == str(ws)


def test_tilde_is_the_workspace_when_home_is_elsewhere(ctx, ws, monkeypatch):
    monkeypatch.setenv("HOME", "/nonexistent-home")
    assert paths.resolve(ctx, "~/src/a.txt") == str(ws / "src" / "a.txt")
    assert paths.resolve(ctx, "~") == str(ws)


def test_tilde_is_home_when_home_is_inside(ctx, ws, monkeypatch):
    monkeypatch.setenv("HOME", str(ws / "src"))
    assert paths.resolve(ctx, "~/a.txt") == str(ws / "src" / "a.txt")


@pytest.mark.parametrize("raw", ["../secret.txt", "/etc/passwd", "src/../../secret.txt", "link_out/secret.txt",
                                 "link_file"])
def test_escapes_are_refused(ctx, ws, tmp_path, raw):
    os.symlink(tmp_path, ws / "link_out")
    os.symlink(tmp_path / "secret.txt", ws / "link_file")
    with pytest.raises(ToolError, match="path is outside the workspace"):
        paths.resolve(ctx, raw)


def test_roots_are_allowed_and_read_only_roots_refuse_writes(ctx, tmp_path):
    assert paths.resolve(ctx, str(tmp_path / "data" / "d.txt")) == str(tmp_path / "data" / "d.txt")
    with pytest.raises(ToolError, match="path is in a protected directory"):
        paths.resolve_for_write(ctx, str(tmp_path / "data" / "new.txt"))
    assert paths.resolve_for_write(ctx, str(tmp_path / "rw" / "new.txt")) == str(tmp_path / "rw" / "new.txt")


def test_protected_directory_refused_directly_and_through_a_link(ctx, ws):
    with pytest.raises(ToolError) as e:
        paths.resolve_for_write(ctx, ".git/hooks/pre-commit")
    assert str(e.value) == "path is in a protected directory: .git/hooks/pre-commit"
    os.symlink(ws / ".git" / "hooks", ws / "innocent")
    with pytest.raises(ToolError, match="protected directory: .git/hooks/x"):
        paths.resolve_for_write(ctx, "innocent/x")
    with pytest.raises(ToolError, match="protected directory"):
        paths.resolve_for_write(ctx, ".git/hooks")


def test_a_symlinked_protected_entry_is_protected_where_it_points(tmp_path):
    ws = tmp_path / "w"
    (ws / "real_hooks").mkdir(parents=True)
    (ws / ".git").mkdir()
    os.symlink(ws / "real_hooks", ws / ".git" / "hooks")
    ctx = Context(str(ws), protected=[str(ws / ".git" / "hooks")])
    with pytest.raises(ToolError, match="protected"):
        paths.resolve_for_write(ctx, "real_hooks/x")


def test_write_through_a_symlinked_file_inside_is_fine_outside_is_not(ctx, ws, tmp_path):
    os.symlink(ws / "src" / "a.txt", ws / "alias.txt")
    res = files.write(ctx, {"path": "alias.txt", "content": "new\n"})
    assert not res.is_error and (ws / "src" / "a.txt").read_text() == "new\n"
    assert os.path.islink(ws / "alias.txt")
    os.symlink(tmp_path / "secret.txt", ws / "bad.txt")
    with pytest.raises(ToolError, match="outside"):
        files.write(ctx, {"path": "bad.txt", "content": "x"})
    assert (tmp_path / "secret.txt").read_text() == "s\n"


def test_write_leaves_no_temp_files_and_respects_the_size_cap(ws):
    ctx = Context(str(ws), max_write_bytes=10)
    assert not files.write(ctx, {"path": "ok.txt", "content": "0123456789"}).is_error
    with pytest.raises(ToolError, match="over the limit of 10 bytes"):
        files.write(ctx, {"path": "big.txt", "content": "01234567890"})
    assert sorted(os.listdir(ws)) == [".git", "ok.txt", "src"]


def test_show_is_relative_inside_the_workspace(ctx, ws, tmp_path):
    assert paths.show(ctx, str(ws)) == "."
    assert paths.show(ctx, str(ws / "src" / "a.txt")) == "src/a.txt"
    assert paths.show(ctx, str(tmp_path / "data")) == str(tmp_path / "data")


def test_bad_hello_values(tmp_path):
    with pytest.raises(ConfigError):
        Context(str(tmp_path / "missing"))
    with pytest.raises(ConfigError):
        Context(str(tmp_path), roots=[{"path": "relative"}])
    with pytest.raises(ConfigError):
        Context(str(tmp_path), network={"mode": "open"})


def test_child_env_has_safe_directory_and_hello_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.pager")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "cat")
    env = Context(str(tmp_path), env={"FOO": "bar"}).child_env()
    assert env["FOO"] == "bar"
    assert env["GIT_CONFIG_COUNT"] == "2"
    assert env["GIT_CONFIG_KEY_0"] == "core.pager"
    assert (env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == ("safe.directory", "*")
