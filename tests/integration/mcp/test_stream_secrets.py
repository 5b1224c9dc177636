"""`runner mcp` relays bash's output as progress notifications redacted, as its final result is
(issue 43, hole 5): a granted secret, whole or printed in two pieces, never reaches the client."""
from __future__ import annotations

import pytest

from ..serve.test_stream_secrets import COMMAND, SECRET, check
from .test_stdio import text, with_session

pytestmark = pytest.mark.usefixtures("no_leaks")

POLICY = """\
extends: default
secrets:
  STREAM_TOKEN: {from_env: RUNNER_TEST_STREAM_TOKEN}
"""


def test_stdio_progress_notifications_are_redacted_a_split_secret_included(env, workspace, tmp_path):
    policy = tmp_path / "secretive.yaml"
    policy.write_text(POLICY)

    async def go(session):
        seen = []

        async def progress(done, total, message):
            seen.append(message or "")

        res = await session.call_tool("bash", {"command": COMMAND}, progress_callback=progress)
        return seen, text(res)

    seen, final = with_session({**env, "RUNNER_TEST_STREAM_TOKEN": SECRET},
                               ["mcp", "--workspace", str(workspace), "--policy", str(policy)], go)
    assert len(seen) >= 2, seen
    check("".join(seen), final)
