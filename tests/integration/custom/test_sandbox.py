"""Custom tools are loaded and run in the sandbox: nothing of theirs touches the host (docker)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from .conftest import install, script

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def executor():
    return "docker"


def test_describing_never_runs_user_code_on_the_host(make_runner, workspace):
    marker = Path(f"/tmp/runner-describe-marker-{uuid.uuid4().hex}")
    script(workspace / ".runner" / "tools", "marks.sh",
           f'#!/bin/sh\nif [ "$TOOL_ACTION" = describe ]; then touch {marker}; echo \'{{"name": "marks", '
           f'"description": "d", "parameters": [], "needsApproval": false}}\'; fi\n')
    script(workspace / "tools", "marks2", f"#!/bin/sh\ntouch {marker}.help\necho 'Leaves a marker'\n")
    r = make_runner()
    names = {s.name for s in r.tools()}
    assert {"marks", "marks2"} <= names
    assert not marker.exists() and not Path(f"{marker}.help").exists()
    inside = r.call("bash", {"command": f"ls {marker} {marker}.help"})
    assert not inside.is_error, inside.content  # the describes ran in this sandbox, and only there


def test_a_tool_cannot_write_outside_the_workspace(make_runner, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    user_tools = Path.home() / ".config" / "runner" / "tools"
    script(user_tools, "escape", "#!/bin/sh\nfor p in \"$@\"; do echo x > \"$p\" && echo \"wrote $p\"; done\n"
                                 "exit 0\n")
    (user_tools / "escape.md").write_text("---\ndescription: try to write files\n---\n")
    install(workspace / "tools", "executable/stamp")
    r = make_runner()
    assert next(s for s in r.tools() if s.name == "escape").source == "user"
    targets = [f"{outside}/x", "/etc/x", "/opt/runner-tools/user/x", "/workspace/tools/x", "/usr/x"]
    res = r.call("escape", {"args": " ".join(targets)})
    assert "wrote" not in res.content, res.content
    assert list(outside.iterdir()) == [] and not (workspace / "tools" / "x").exists()
    assert sorted(p.name for p in user_tools.iterdir()) == ["escape", "escape.md"]
    res = r.call("escape", {"args": "/workspace/inside.txt"})
    assert "wrote" in res.content and (workspace / "inside.txt").read_text() == "x\n"


def test_a_tools_link_leading_out_of_the_workspace_is_refused(make_runner, workspace, tmp_path):
    """A hostile workspace whose tools/ is a symlink to a folder of the controller: the folder
    is neither scanned nor mounted, so its files never reach the sandbox."""
    outside = tmp_path / "controller-secrets"
    script(outside, "deploy", "#!/bin/sh\necho 'Deploys things'\n")
    (outside / "id_ed25519").write_text("PRIVATE KEY\n")
    (workspace / "tools").symlink_to(outside)
    r = make_runner()
    assert "deploy" not in {s.name for s in r.tools()}
    assert any("is a symbolic link" in e["error"] and e["error"].endswith("refused") for e in r.custom_errors())
    res = r.call("bash", {"command": "grep -rs 'PRIVATE KEY' /opt /workspace/tools/ 2>&1; ls /opt/runner-tools 2>&1"})
    assert "PRIVATE KEY" not in res.content, res.content


def test_a_tool_folder_the_sandbox_cannot_list_is_reported_not_lost_silently(make_runner, workspace, tmp_path):
    """The operator's folder is readable here (root) but not by the sandbox's user, which has no
    capability to pass its mode: its tools are missing, and custom_errors says why."""
    folder = tmp_path / "team-tools"
    script(folder, "deploy", "#!/bin/sh\necho deployed\n")
    (folder / "deploy.md").write_text("---\ndescription: deploys\n---\n")
    install(workspace / "tools", "executable/stamp")
    os.chown(folder, 4242, 4242)
    folder.chmod(0o700)
    r = make_runner(**{"tools.folders": [str(folder)]})
    names = {s.name for s in r.tools()}
    assert "stamp" in names and "deploy" not in names
    why = [e for e in r.custom_errors() if e["place"] == "policy"]
    assert len(why) == 1 and "could not be listed" in why[0]["error"] and "Permission denied" in why[0]["error"], \
        r.custom_errors()
