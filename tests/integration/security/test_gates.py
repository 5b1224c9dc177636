"""The policy's gates hold for every tool, built-in or custom (one guard pipeline), and the git
tools never read an argument as an option. Real docker sandboxes throughout."""
from __future__ import annotations

import subprocess

import pytest

from runner import Runner
from runner.policy import load

pytestmark = pytest.mark.usefixtures("no_leaks")

RUN_TOOL = "#!/bin/sh\necho ran > ran.marker\necho \"ran with $*\"\n"


def workspace_with_run_tool(tmp_path):
    """A workspace holding tools/run: an executable that leaves ran.marker when it runs (its
    description comes from run.md, so describing it never runs it)."""
    ws = tmp_path / "ws"
    (ws / "tools").mkdir(parents=True)
    (ws / "tools" / "run").write_text(RUN_TOOL)
    (ws / "tools" / "run").chmod(0o755)
    (ws / "tools" / "run.md").write_text("---\ndescription: runs a command\n---\n")
    return ws


def git_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q",
                    "--allow-empty", "-m", "start"], check=True)
    subprocess.run(["git", "-C", str(ws), "config", "push.default", "current"], check=True)
    return ws


def runner(ws, **overrides):
    return Runner(workspace=ws, policy=load("default").effective(overrides={"sandbox.executor": "docker",
                                                                             **overrides}))


def test_custom_tools_are_switched_off_with_bash(tmp_path):
    ws = workspace_with_run_tool(tmp_path)
    with runner(ws, **{"features.bash": False, "features.writes": False}) as r:
        res = r.call("run", {"args": "id"})
        assert res.is_error and res.meta["error_type"] == "gated", res.text
        assert "features.bash: false" in res.text and "features.custom_tools" in res.text
        assert "run" not in {s.name for s in r.tools()}
    assert not (ws / "ran.marker").exists()


def test_custom_tools_without_bash_when_the_policy_says_so(tmp_path):
    ws = workspace_with_run_tool(tmp_path)
    with runner(ws, **{"features.bash": False, "features.custom_tools": True}) as r:
        assert "run" in {s.name for s in r.tools()}
        res = r.call("run", {"args": "x"})
        assert not res.is_error and res.text.strip() == "ran with x", res.text
        assert r.call("bash", {"command": "true"}).meta["error_type"] == "gated"
    assert (ws / "ran.marker").exists()


def test_custom_tools_follow_the_preset_and_the_allow_list(tmp_path):
    ws = workspace_with_run_tool(tmp_path)
    with runner(ws, **{"tools.preset": "readonly"}) as r:
        res = r.call("run", {})
        assert res.is_error and "not allowed by the policy" in res.text and "preset readonly" in res.text
        assert "run" not in {s.name for s in r.tools()}
    assert not (ws / "ran.marker").exists()
    with runner(ws, **{"tools.preset": "readonly", "tools.allow": ["run"]}) as r:
        assert "run" in {s.name for s in r.tools()}
        assert not r.call("run", {}).is_error
    assert (ws / "ran.marker").exists()


@pytest.mark.parametrize("tool", ["run", "ls"])
def test_rate_limit_and_approval_hold_for_custom_and_builtin_alike(tmp_path, tool):
    ws = workspace_with_run_tool(tmp_path)
    with runner(ws, **{"rate_limits.tools": {tool: {"capacity": 1, "refill_per_second": 0.001}}}) as r:
        assert not r.call(tool, {}).is_error
        res = r.call(tool, {})
        assert res.is_error and res.text.startswith(f"rate limit: {tool} allows") and res.meta["retry_after"] > 0
    with runner(ws, **{"tools.deny": [tool]}) as r:
        res = r.call(tool, {})
        assert res.is_error and "tools.deny" in res.text and res.meta["error_type"] == "gated"


PWN = "touch /workspace/PWNED; false"


@pytest.mark.parametrize("tool, args", [
    ("git_pull", {"remote": f"--upload-pack={PWN}", "branch": "."}),
    ("git_pull", {"remote": ".", "branch": f"--upload-pack={PWN}"}),
    ("git_push", {"remote": f"--receive-pack={PWN}", "branch": "."}),
    ("git_push", {"remote": f"--exec={PWN}", "branch": "."}),
    ("git_push", {"remote": ".", "branch": f"--receive-pack={PWN}"}),
])
def test_git_arguments_are_never_read_as_options(tmp_path, tool, args):
    ws = git_workspace(tmp_path)
    with runner(ws, **{"tools.preset": "all", "features.bash": False}) as r:
        assert not r.call("write", {"path": "a.txt", "content": "a\n"}).is_error
        res = r.call(tool, args)
        assert res.is_error and "must not start with '-'" in res.text, res.text
        assert res.meta["error_type"] == "validation"
    assert not (ws / "PWNED").exists()


def test_git_paths_that_look_like_options_are_paths(tmp_path):
    ws = git_workspace(tmp_path)
    with runner(ws, **{"tools.preset": "all"}) as r:
        for name in ("--output=/workspace/PWNED", "-p"):
            assert not r.call("write", {"path": name, "content": "x\n"}).is_error
        added = r.call("git_add", {"files": ["--output=/workspace/PWNED", "-p"]})
        assert not added.is_error, added.text
        assert not r.call("git_diff", {"staged": True, "path": "--output=/workspace/PWNED"}).is_error
        status = r.call("git_status", {}).text
        assert "A  --output=/workspace/PWNED" in status and "A  -p" in status
    assert not (ws / "PWNED").exists()


def test_deeply_nested_arguments_are_an_error_result_not_a_crash(tmp_path):
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    ws = tmp_path / "ws"
    ws.mkdir()
    with runner(ws, **{"tools.preset": "all"}) as r:
        res = r.call("echo", {"text": deep})
        assert res.is_error and res.meta["error_type"] == "validation" and "nested" in res.text
        assert r.call("echo", {"text": "still here"}).text == "still here"


HOSTILE_GIT_CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false
\tfsmonitor = "touch /workspace/PWNED-fsmonitor; false"
\thooksPath = hk
\tpager = "touch /workspace/PWNED-pager; cat"
[filter "x"]
\tclean = "touch /workspace/PWNED-clean; cat"
\tsmudge = "touch /workspace/PWNED-smudge; cat"
[diff "x"]
\ttextconv = "touch /workspace/PWNED-textconv; cat"
\tcommand = "touch /workspace/PWNED-diffcmd; true"
[diff]
\texternal = "touch /workspace/PWNED-external; true"
[commit]
\tgpgSign = true
[gpg]
\tprogram = hk/pre-commit
[remote "origin"]
\turl = .
\tuploadpack = "touch /workspace/PWNED-uploadpack; false"
\treceivepack = "touch /workspace/PWNED-receivepack; false"
\tfetch = +refs/heads/*:refs/remotes/origin/*
[include]
\tpath = more.cfg
"""


def test_repository_config_runs_no_program_when_bash_is_off(tmp_path):
    """A hostile workspace holds a .git/config that names programs (the write tool may not write it:
    .git/config is protected); with command execution off the git tools still work and run none of
    the programs it names."""
    ws = git_workspace(tmp_path)
    (ws / ".git" / "config").write_text(HOSTILE_GIT_CONFIG)
    (ws / "hk").mkdir()
    (ws / "hk" / "pre-commit").write_text("#!/bin/sh\ntouch /workspace/PWNED-hook\n")
    (ws / "hk" / "pre-commit").chmod(0o755)
    (ws / "more.cfg").write_text('[merge "x"]\n\tdriver = "touch /workspace/PWNED-merge; false"\n'
                                 '[credential]\n\thelper = "!touch /workspace/PWNED-credential"\n')
    with runner(ws, **{"tools.preset": "all", "features.bash": False}) as r:
        assert r.call("write", {"path": ".git/config", "content": HOSTILE_GIT_CONFIG}).meta["error_type"] == "gated"
        assert not r.call("write", {"path": ".gitattributes", "content": "*.txt filter=x diff=x merge=x\n"}).is_error
        assert not r.call("write", {"path": "a.txt", "content": "one\n"}).is_error
        for tool, args in [("git_status", {}), ("git_add", {"files": ["a.txt", ".gitattributes"]}),
                           ("git_commit", {"message": "add a"}), ("git_log", {}),
                           ("git_diff", {"path": "a.txt"}), ("git_diff", {"staged": True}),
                           ("git_pull", {"remote": "origin", "branch": "master"}),
                           ("git_push", {"remote": "origin", "branch": "HEAD:refs/heads/other"})]:
            if tool == "git_diff":
                r.call("write", {"path": "a.txt", "content": "two\n"})
            res = r.call(tool, args)
            assert not res.is_error or tool in ("git_pull", "git_push"), (tool, res.text)
        assert "add a" in r.call("git_log", {}).text
    assert sorted(p.name for p in ws.iterdir() if p.name.startswith("PWNED")) == []


@pytest.mark.parametrize("overrides", [{"tools.preset": "readonly"}, {"features.bash": False},
                                       {"tools.preset": "git", "tools.allow": ["read"]}])
def test_custom_tools_are_not_even_described_when_none_could_be_called(tmp_path, overrides):
    """Describing runs a tool's program (`--help` here): a policy that allows no custom tool
    must not run them that way either."""
    ws = tmp_path / "ws"
    (ws / "tools").mkdir(parents=True)
    (ws / "tools" / "probe").write_text("#!/bin/sh\necho described > described.marker\necho 'Probes'\n")
    (ws / "tools" / "probe").chmod(0o755)
    with runner(ws, **overrides) as r:
        assert "probe" not in {s.name for s in r.tools()}
        assert r.call("probe", {}).meta["error_type"] == "gated"
    assert not (ws / "described.marker").exists()


def test_every_builtin_that_writes_or_reaches_the_network_is_under_its_gate():
    """The gate map covers the registry: a tool whose spec writes is off with features.writes:
    false, one that reaches the network is off with features.network_tools: false (git_push and
    git_pull were not)."""
    from runner.tools.schemas import registry

    everything = registry.preset("all")
    for gate, flag in (("writes", "writes"), ("network_tools", "network")):
        pol = load("default").effective(overrides={"tools.preset": "all", f"features.{gate}": False})
        for spec in registry.all_specs():
            why = pol.tool_gate(spec.name, everything)
            if getattr(spec, flag):
                assert why and f"features.{gate}: false" in why, spec.name
