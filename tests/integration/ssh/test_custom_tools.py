"""Custom tools with executor ssh: the project's tool folders are the host's, found and run
there; this machine's folders (user, policy, Python packages) are copied to a folder of the
session on the host, which closing the Runner removes."""
from __future__ import annotations

import glob
import importlib

import pytest

from runner import Runner

from ..custom.conftest import PLUGIN, install
from ..custom.test_python import install_dist


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


def test_custom_tools_over_ssh(ssh_config, tmp_path, home, monkeypatch):
    ws = tmp_path / "remote-ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one two\nthree\n")
    install(ws / "tools", "executable/wordcount", "executable/wordcount.md")
    install(ws / ".acai" / "tools", "describe-execute/greet.py")
    install(home / ".config" / "runner" / "tools", "executable/stamp")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    install_dist(site, "ssh-tools", "1.0", {"ssh_tools.py": 'def shout(text: str) -> str:\n    "Upper-case."\n'
                                                             '    return text.upper()\n'}, {"shout": "ssh_tools:shout"})
    importlib.invalidate_caches()
    cfg = ssh_config.model_copy(update={"workdir": str(ws)})
    r = Runner(executor="ssh", workspace=ws, ssh=cfg, preset="all",
               overrides={"tools.plugins": [{"path": str(PLUGIN)}]})
    with r:
        tools = {s.name: s for s in r.tools() if s.source != "builtin"}
        assert {n: tools[n].source for n in ("wordcount", "greet", "stamp", "shout", "note")} == {
            "wordcount": "project", "greet": "project", "stamp": "user", "shout": "python", "note": "policy"}, \
            r.custom_errors()
        shipped = f"/tmp/runner-tools-{r.session_id}"
        assert tools["stamp"].path == f"{shipped}/user/stamp"
        assert r.call("wordcount", {"args": "a.txt"}).content.split() == ["2", "3", "14", "a.txt"]
        assert r.call("greet", {"who": "bo"}).content == '{"greeting":"hello bo"}'
        assert r.call("stamp", {"args": "x"}).content == "1: x\n"
        assert r.call("shout", {"text": "over ssh"}).content == "OVER SSH"
        assert r.call("note", {"text": "n"}).content.startswith("note #1 ")
        res = r.call("write", {"path": "tools/evil", "content": "#!/bin/sh\n"})
        assert res.is_error and "protected" in res.content
        assert glob.glob(shipped)
    assert not glob.glob(shipped)  # removed by close


def test_the_copy_is_capped_and_named_safely(ssh_config, tmp_path, home, monkeypatch):
    from runner.tools import custom
    from runner.backends import ssh as ssh_backend

    ws = tmp_path / "remote-ws"
    ws.mkdir()
    install(home / ".config" / "runner" / "tools", "executable/stamp")
    cfg = ssh_config.model_copy(update={"workdir": str(ws)})
    monkeypatch.setattr(ssh_backend, "SHIP_MAX", 10)
    with Runner(executor="ssh", workspace=ws, ssh=cfg, session="a/../../b c") as r:
        root = custom.shipped_root(r.session)
        assert root == "/tmp/runner-tools-a_______b_c"
        assert "stamp" not in {s.name for s in r.tools()}
        assert any("over 10 to copy" in e["error"] for e in r.custom_errors())
        assert not glob.glob(root)  # refused before anything was sent
        monkeypatch.setattr(ssh_backend, "SHIP_MAX", 64 * 1024 * 1024)
        assert "added: stamp" in r.refresh_tools()["report"]
        assert glob.glob(root)
    assert not glob.glob(root)
