"""The operator page's record of the last calls (runner/servers/serve/recent.py): bounded, newest
first, errors apart, whatever ended the call."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")

from runner.results import ToolResult  # noqa: E402
from runner.servers.serve.recent import MAX_CALLS, MAX_ERRORS, Recent  # noqa: E402


def test_calls_and_errors_are_kept_newest_first_and_bounded():
    r = Recent()
    t = time.monotonic()
    r.note("a", "s1", "c1", "bash", t, ToolResult(content="fine"))
    r.note("a", "s1", "c2", "read", t, ToolResult.error("no such file", error_type="not_found"))
    r.note("b", "s2", "c1", "bash", t, None, RuntimeError("the sandbox died"))
    got = r.snapshot()
    assert [c["call_id"] for c in got["calls"]] == ["c1", "c2", "c1"][::-1]
    assert [c["ok"] for c in got["calls"]] == [False, False, True]
    assert got["errors"][0]["error"] == "the sandbox died" and got["errors"][1]["error"].startswith("not_found")
    for n in range(MAX_CALLS + MAX_ERRORS):
        r.note("a", "s1", f"c{n}", "ls", t, ToolResult.error("x"))
    got = r.snapshot()
    assert len(got["calls"]) == MAX_CALLS and len(got["errors"]) == MAX_ERRORS
