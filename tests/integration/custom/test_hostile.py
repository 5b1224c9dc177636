"""A hostile workspace against the custom-tool machinery: links leading out, modules that
would shadow the harnesses' or the agent's own imports, tools that print over their answer."""
from __future__ import annotations

import importlib
import json

import pytest

from .conftest import EXAMPLES, install, script
from .test_python import install_dist

pytest.importorskip("lupa", reason="the optional extra runner[lua] is not installed")

SHADOWS = {  # modules the harnesses and the agent import first, planted in the workspace (cwd)
    "json.py": "raise SystemExit('json.py from the workspace was imported')\n",
    "inspect.py": "raise SystemExit('inspect.py from the workspace was imported')\n",
    "typing.py": "raise SystemExit('typing.py from the workspace was imported')\n",
    "importlib.py": "raise SystemExit('importlib.py from the workspace was imported')\n",
}


def test_links_leading_out_are_refused_for_plugins_and_policy_folders(make_runner, workspace, tmp_path):
    secret = tmp_path / "controller" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY\n")
    script(secret.parent, "deploy", "#!/bin/sh\necho 'Deploys things'\n")
    (workspace / "plugins").mkdir()
    (workspace / "plugins" / "bridge").symlink_to(secret)  # a relative plugin path
    (workspace / "mcp-bridge").symlink_to(secret)  # a bare name: a command, never this file
    (workspace / "extra-tools").symlink_to(secret.parent)  # a relative policy folder
    r = make_runner(**{"tools.preset": "all", "tools.folders": ["extra-tools"],
                       "tools.plugins": [{"path": "plugins/bridge"}, {"path": "mcp-bridge"}]})
    assert "deploy" not in {s.name for s in r.tools()}
    why = [e for e in r.custom_errors()]
    assert sum("is a symbolic link" in e["error"] and e["error"].endswith("refused") for e in why) == 2, why
    bare = next(e for e in why if e["path"] == "mcp-bridge")
    assert bare["error"].startswith("cannot start plugin mcp-bridge: No such file")  # PATH only
    res = r.call("bash", {"command": "grep -rs 'PRIVATE KEY' /opt/runner-tools /workspace/plugins/ 2>&1; true"})
    if r.policy.sandbox.executor == "docker":  # local has no isolation: only that nothing was loaded
        assert "PRIVATE KEY" not in res.content, res.content


def test_workspace_modules_shadow_neither_the_agent_nor_the_harnesses(make_runner, workspace, tmp_path, monkeypatch):
    for name, text in SHADOWS.items():
        (workspace / name).write_text(text)
    shutil_copy_lua(workspace)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    install_dist(site, "gated", "1.0", {"gated_tool.py": (
        "class Gated:\n    '''Needs a person's yes.'''\n    needs_approval = True\n"
        "    parameters = {'type': 'object', 'properties': {}}\n    def run(self):\n        return 'gated ran'\n")},
        {"gated": "gated_tool:Gated"})
    importlib.invalidate_caches()
    r = make_runner(**{"tools.preset": "all"})
    tools = {s.name: s for s in r.tools()}
    assert r.custom_errors() == [], r.custom_errors()
    assert tools["gated"].needs_approval is True  # not forged by a planted inspect.py
    assert r.call("read", {"path": "json.py"}).content.count("workspace was imported") == 1  # the agent works
    assert json.loads(r.call("line_count", {"path": "json.py"}).content)["lines"] == 1
    res = r.call("gated", {})
    assert res.is_error and "needs approval" in res.content  # the default policy's rule, not bypassed


def shutil_copy_lua(workspace):
    import shutil

    shutil.copytree(EXAMPLES / "lua", workspace / "tools")
    (workspace / "tools" / "lib" / "evil.lua").write_text("error('lib from the tool folder only')\n")
    (workspace / "lib").mkdir()  # ./lib/line_util.lua in the workspace must not replace the tool's
    (workspace / "lib" / "line_util.lua").write_text("error('line_util.lua from the workspace was required')\n")


def test_prints_do_not_corrupt_the_answer(make_runner, workspace, tmp_path, monkeypatch):
    script(workspace / "tools", "chatty.lua", "print('loading chatty')\nreturn { name = 'chatty', "
           "description = 'prints', input_schema = {type = 'object'},\n  execute = function() print('debug line') "
           "io.write('more debug\\n') return {ok = true} end }\n", mode=0o644)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    install_dist(site, "chatty-py", "1.0", {"chatty_py.py": (
        "print('importing')\n\ndef talk() -> str:\n    '''Talks.'''\n    print('debug from python')\n"
        "    return 'answer'\n")}, {"talk": "chatty_py:talk"})
    importlib.invalidate_caches()
    r = make_runner()
    assert r.call("chatty", {}).content == '{"ok":true}'
    assert r.call("talk", {}).content == "answer"


def test_a_user_tool_folder_inside_the_workspace_is_protected(make_runner, workspace, monkeypatch):
    """The workspace is the home directory: ~/.config/runner/tools lies inside it and must not
    be rewritable by the agent (its tools are loaded in later sessions too)."""
    monkeypatch.setenv("HOME", str(workspace))
    install(workspace / ".config" / "runner" / "tools", "executable/stamp")
    r = make_runner(**{"tools.preset": "all"})
    assert next(s for s in r.tools() if s.name == "stamp").source == "user"
    res = r.call("write", {"path": ".config/runner/tools/stamp", "content": "#!/bin/sh\necho pwned\n"})
    assert res.is_error and "protected" in res.content
    assert "pwned" not in r.call("stamp", {"args": "x"}).content
