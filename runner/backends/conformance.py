"""The conformance battery of the placement half of a backend, as executors/conformance.py is of
the executor half: what every Placement must answer, against the real thing.

    from runner.backends import conformance
    report = conformance.run(placement)      # {check name: None (passed) | "skipped: …" | failure}
    assert all(v is None or v.startswith("skipped") for v in report.values()), report

Each check is a plain function `check(placement)` of a Placement made for a session
(`config.placement(Setting(workspace, policy, session_id))`, the workspace a writable, empty
directory of this machine, not yet opened); it raises AssertionError (or any exception) on a
failure and Skip when it does not apply. Checks that start a sandbox open the placement and close
it again. runner's own backends run it in tests/integration/conformance/test_placements.py.
"""
from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Callable

from .base import Placement


class Skip(Exception):
    """This check does not apply to this placement; str() says why."""


Check = Callable[[Placement], None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def run(placement: Placement, only: list[str] | None = None) -> dict[str, str | None]:
    """Run the battery (or the checks named in `only`): {name: None | 'skipped: why' | 'Error: message'}."""
    out: dict[str, str | None] = {}
    for name, fn in CHECKS.items():
        if only is not None and name not in only:
            continue
        try:
            fn(placement)
            out[name] = None
        except Skip as e:
            out[name] = f"skipped: {e}"
        except Exception as e:  # a failure of this check; the battery goes on
            out[name] = f"{type(e).__name__}: {e}"
    return out


def _host_ws(p: Placement) -> Path:
    return Path(p.setting.workspace)


def _hello(p: Placement) -> dict:
    pol = p.setting.policy
    return {"max_write_bytes": pol.limits.max_write, "network": pol.network.model_dump(mode="json"), "roots": [],
            "search_endpoint": pol.network.search_endpoint, "env": {}, "single_call": False}


# -- where things are --------------------------------------------------------------------------
@check
def the_workspace_maps_both_ways(p: Placement) -> None:
    """A workspace path as the sandbox sees it (in_sandbox) is, as this machine sees it
    (host_path), that path in the workspace."""
    ws = _host_ws(p)
    assert p.in_sandbox("") == p.workspace
    for rel in ("a", "a/b.txt", "dir/sub/c"):
        inside = p.in_sandbox(rel)
        assert inside.startswith(p.workspace.rstrip("/") + "/"), (rel, inside)
        assert Path(p.host_path(inside)) == ws / rel, (rel, inside, p.host_path(inside))
    assert Path(p.host_path(p.workspace)) == ws


@check
def a_path_outside_the_workspace_is_not_mapped_into_it(p: Placement) -> None:
    ws = str(_host_ws(p))
    for path in ("/nonexistent-runner-conformance/x", p.workspace.rstrip("/") + "x/y", "relative/y"):
        host = p.host_path(path)
        assert host != ws and not host.startswith(ws + "/"), (path, host)


@check
def a_tool_folder_is_seen_in_place_or_shipped_under_tools_root(p: Placement) -> None:
    """A folder of this machine is either where the sandbox sees it (sandbox_view) or shipped: then
    the placement has a tools_root to ship it under."""
    with tempfile.TemporaryDirectory(prefix="runner-conformance-tools-") as d:
        view = p.sandbox_view(Path(d))
        assert view is not None or p.tools_root is not None, "a folder nowhere to be seen and nowhere to ship it"
        assert view is None or view.startswith("/"), view


@check
def warnings_are_lines(p: Placement) -> None:
    lines = p.warnings()
    assert isinstance(lines, list) and all(isinstance(w, str) and w and "\n" not in w for w in lines), lines


@check
def roots_are_paths_with_their_mode(p: Placement) -> None:
    roots = p.roots()
    assert isinstance(roots, list)
    for r in roots:
        assert set(r) >= {"path", "read_only"} and str(r["path"]).startswith("/"), r


# -- what the session holds ----------------------------------------------------------------------
@check
def open_and_close_raise_nothing_and_close_again_is_harmless(p: Placement) -> None:
    p.check([])
    p.require_engine("per-session")
    p.open()
    p.close()
    p.close()


@check
def the_agent_sees_the_workspace_where_the_placement_says(p: Placement) -> None:
    """A sandbox made by the placement reads, at in_sandbox(rel), the file this machine wrote at
    the workspace's rel, and what it writes there is in the workspace here."""
    ws = _host_ws(p)
    (ws / "from-host.txt").write_text("written on this machine\n")
    p.open()
    try:
        sb = p.make_sandbox(_hello(p), [], []).start()
        try:
            msg = sb.call("conformance-read", "read", {"path": p.in_sandbox("from-host.txt")}, timeout=60)
            assert not msg.get("is_error") and "written on this machine" in str(msg.get("content")), msg
            msg = sb.call("conformance-write", "write", {"path": p.in_sandbox("from-sandbox.txt"),
                                                         "content": "written in the sandbox\n"}, timeout=60)
            assert not msg.get("is_error"), msg
            assert (ws / "from-sandbox.txt").read_text() == "written in the sandbox\n"
        finally:
            sb.close()
    finally:
        p.close()


@check
def remove_sandboxes_ends_a_call_under_way(p: Placement) -> None:
    """remove_sandboxes (a client gone) ends a running call now: it ends as SandboxDied, not at
    its timeout."""
    from ..controller.sandbox import SandboxDied

    if not p.isolated:
        raise Skip("this placement's sandboxes are processes of this machine: nothing to remove")
    p.open()
    try:
        sb = p.make_sandbox(_hello(p), [], []).start()
        ended: list[BaseException | dict] = []
        started = threading.Event()

        def call() -> None:
            try:
                ended.append(sb.call("conformance-sleep", "bash", {"command": "echo up; sleep 300", "timeout": 600},
                                     timeout=600, on_output=lambda _text: started.set()))
            except BaseException as e:  # the outcome under test
                ended.append(e)

        t = threading.Thread(target=call, daemon=True)
        t.start()
        try:
            assert started.wait(120), "the call never started"
            p.remove_sandboxes()
            t.join(300)  # the call's own bound, far past a removal; not a timing threshold
            assert ended and isinstance(ended[0], SandboxDied), ended
        finally:
            sb.close()
    finally:
        p.close()

