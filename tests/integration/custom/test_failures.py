"""Tools that misbehave: a bad describe is skipped with its reason, a dying or hanging plugin,
3 MB of output, wrong-typed arguments, writes outside the workspace."""
from __future__ import annotations

import json

import pytest

from runner import Runner

from .conftest import PLUGIN, install, script

DESCRIBE = '#!/bin/sh\nif [ "$TOOL_ACTION" = describe ]; then\n%s\nexit 0\nfi\necho ran\n'


def test_bad_describes_are_skipped_with_reasons_and_the_others_load(make_runner, workspace):
    d = workspace / ".runner" / "tools"
    script(d, "garbage.sh", DESCRIBE % "echo '{not json at all'")
    script(d, "nonzero.sh", DESCRIBE % "echo oops >&2; exit 3")
    script(d, "hangs.sh", DESCRIBE % "sleep 600")
    script(d, "noname.sh", DESCRIBE % "echo '{\"description\": \"x\"}'")
    install(d, "describe-execute/greet.py")
    install(workspace / "tools", "executable/stamp")
    script(workspace / "tools", "helpless", "#!/bin/sh\nexit 1\n")
    r = make_runner(**{"tools.describe_timeout": 1})
    names = {s.name for s in r.tools()}
    assert {"greet", "stamp"} <= names
    why = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in r.custom_errors()}
    assert "invalid JSON" in why["garbage.sh"]
    assert "exited with code 3" in why["nonzero.sh"] and "oops" in why["nonzero.sh"]
    assert "did not finish within 1s" in why["hangs.sh"]
    assert "no valid name" in why["noname.sh"]
    assert "--help` exited with code 1" in why["helpless"]
    assert r.call("greet", {"who": "x"}).content == '{"greeting":"hello x"}'


def test_plugin_that_dies_mid_call_is_restarted(make_runner):
    r = make_runner(**{"tools.plugins": [{"path": str(PLUGIN)}]})
    assert r.call("note", {"text": "a"}).content.startswith("note #1 ")
    died = r.call("note", {"text": "b", "mode": "die"})
    assert died.is_error and "exited (code 3)" in died.content and "dying on purpose" in died.content
    again = r.call("note", {"text": "c"})
    assert not again.is_error and again.content.startswith("note #1 ")  # a fresh process


def test_plugin_that_hangs_is_killed_at_the_timeout(make_runner):
    r = make_runner(**{"tools.plugins": [{"path": str(PLUGIN)}], "limits.tool_timeouts": {"note": 1}})
    hung = r.call("note", {"text": "z", "mode": "hang"})
    assert hung.is_error and "did not answer within 1s" in hung.content and hung.meta["error_type"] == "timeout"
    assert r.call("note", {"text": "after"}).content.startswith("note #1 ")


def test_three_megabytes_of_output_are_truncated_and_kept(make_runner, workspace):
    install(workspace / ".runner" / "tools", "describe-execute/repeat.sh")
    r = make_runner()
    res = r.call("repeat", {"count": 3_000_000, "char": "y"})
    assert not res.is_error and res.meta["truncated"] and len(res.content) < 100_000
    kept = r.call("result", {"call_id": res.meta["kept_as"]})
    assert not kept.is_error and "yyyy" in kept.content


def test_wrong_typed_arguments_name_the_argument(make_runner, workspace):
    install(workspace / ".acai" / "tools", "describe-execute/greet.py")
    install(workspace / "tools", "executable/stamp")
    r = make_runner(**{"tools.plugins": [{"path": str(PLUGIN)}]})
    res = r.call("greet", {"who": "x", "times": "many"})
    assert res.is_error and res.meta["error_type"] == "validation" and "times" in res.content
    res = r.call("greet", {"times": 2})
    assert res.is_error and "who" in res.content and "required" in res.content.lower()
    res = r.call("greet", {"who": "x", "extra": 1})
    assert res.is_error and "extra" in res.content
    res = r.call("stamp", {"args": ["a", "b"]})
    assert res.is_error and "args" in res.content
    res = r.call("note", {"text": "a", "mode": "sideways"})
    assert res.is_error and "mode" in res.content


def test_needs_approval_goes_through_the_policy(make_runner, workspace):
    d = workspace / ".runner" / "tools"
    # needsApproval defaults to true for describe/execute scripts, as in acai
    script(d, "risky", DESCRIBE % "echo '{\"name\": \"risky\", \"description\": \"d\", \"parameters\": []}'")
    r = make_runner(**{"approval": "deny"})
    assert next(s for s in r.tools() if s.name == "risky").needs_approval
    res = r.call("risky", {})
    assert res.is_error and "needs approval" in res.content and res.meta["error_type"] == "gated"
    r2 = make_runner(**{"approval": "allow"})
    assert r2.call("risky", {}).content == "ran"


def test_a_file_name_that_is_no_tool_name_is_skipped(make_runner, workspace):
    from .conftest import script

    script(workspace / "tools", "has space", "#!/bin/sh\necho 'A tool'\n")
    script(workspace / "tools", "9lives", "#!/bin/sh\necho 'A tool'\n")
    install(workspace / "tools", "executable/stamp")
    r = make_runner()
    names = {s.name for s in r.tools()}
    assert "stamp" in names and "has space" not in names and "9lives" not in names
    assert sum("bad tool name" in e["error"] for e in r.custom_errors()) == 2


def test_output_is_redacted_and_each_call_audited(make_runner, workspace, tmp_path, monkeypatch):
    """A custom tool that prints a policy secret: the result and the audit line carry the
    redaction marker, never the value; the audit line names the tool and its source."""
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("RUNNER_AUDIT_LOG", str(log))
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-value-123456")
    script(workspace / ".runner" / "tools", "leak.sh",
           '#!/bin/sh\nif [ "$TOOL_ACTION" = describe ]; then echo \'{"name": "leak", "description": "d", '
           '"parameters": [], "needsApproval": false}\'; exit 0; fi\necho "token=$DEPLOY_TOKEN"\n')
    r = make_runner(**{"secrets": {"DEPLOY_TOKEN": {"from_env": "DEPLOY_TOKEN"}}})
    res = r.call("leak", {})
    assert not res.is_error and "s3cr3t" not in res.content and "[REDACTED" in res.content
    r.call("leak", {"extra": 1})
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["tool"], x["status"], x["error_type"]) for x in recs] == [("leak", "ok", None),
                                                                         ("leak", "error", "validation")]
    assert "s3cr3t" not in log.read_text()


@pytest.mark.usefixtures("no_leaks")
def test_a_tool_the_sandbox_cannot_read_is_named_with_why(workspace):
    """A tool file the sandbox's user may not read is said in custom_errors, not dropped
    without a word (this machine's root reads it, so it is described in the sandbox)."""
    script(workspace / "tools", "locked.sh", DESCRIBE % "echo '{}'", mode=0o000)
    install(workspace / "tools", "executable/stamp")
    with Runner(executor="docker", workspace=workspace) as r:
        assert "stamp" in {s.name for s in r.tools()}
        why = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in r.custom_errors()}
    assert "locked.sh" in why, why
    assert "could not be read" in why["locked.sh"] and "Permission denied" in why["locked.sh"], why


def test_what_this_machine_cannot_read_still_has_the_sandbox_look(tmp_path, monkeypatch):
    """The controller's look before starting a sandbox never decides alone that there is no
    tool: a tool file it cannot read, or a folder it cannot open, counts (the sandbox then says
    why). Root reads everything here, so the refusals are made for the test."""
    from runner.tools import custom
    from runner.untrusted import wspath

    folder = tmp_path / "tools"
    script(folder, "t.sh", DESCRIBE % "echo '{}'")
    assert custom._holds_tools(tmp_path / "ws", folder)
    monkeypatch.setattr(wspath.DirFd, "read_head", lambda self, name, limit: None)
    assert custom._holds_tools(tmp_path / "ws", folder)

    def refused(ws, f):
        raise PermissionError(13, "Permission denied", str(f))

    monkeypatch.setattr(custom, "_open_folder", refused)
    assert custom._holds_tools(tmp_path / "ws", folder)


def test_a_link_to_nothing_in_a_tool_folder_is_named(make_runner, workspace):
    install(workspace / "tools", "executable/stamp")
    (workspace / "tools" / "ghost").symlink_to("/nonexistent/runner-test-ghost")
    r = make_runner()
    assert "stamp" in {s.name for s in r.tools()}
    why = {e["path"].rsplit("/", 1)[-1]: e["error"] for e in r.custom_errors()}
    assert "link to nothing" in why.get("ghost", ""), why
