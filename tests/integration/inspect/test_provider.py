"""The provider's own promises beyond inspect's battery."""
from __future__ import annotations

import random

import anyio
import pytest

from runner.servers.inspect import RunnerSandboxConfig, RunnerSandboxEnvironment

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_cancelling_an_exec_in_an_anyio_scope_kills_the_command(no_leaks):
    """inspect cancels through anyio cancel scopes (a cancellation delivered at every await):
    the command is dead once the scope has ended, and the sandbox keeps working."""
    envs = await RunnerSandboxEnvironment.sample_init("provider", RunnerSandboxConfig(), {})
    env = envs["default"]
    marker = f"81.{random.randrange(10**6)}"
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(env.exec, ["sh", "-c", f"touch started; sleep {marker} & sleep {marker}"])
            seen = await env.exec(["sh", "-c", "while [ ! -e started ]; do sleep 0.05; done; echo seen"], timeout=60)
            assert seen.stdout == "seen\n"
            tg.cancel_scope.cancel()
        left = await env.exec(["ps", "-eo", "args"])
        assert left.success and f"sleep {marker}" not in left.stdout
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("provider", None, envs, False)


async def test_a_policy_file_gives_the_sandbox_its_limits(no_leaks, tmp_path):
    policy = tmp_path / "tight.yaml"
    policy.write_text("extends: default\nlimits:\n  pids: 77\n")
    envs = await RunnerSandboxEnvironment.sample_init("provider", str(policy), {})
    env = envs["default"]
    try:
        res = await env.exec(["sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"])
        assert res.stdout.strip() == "77"
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("provider", None, envs, False)


@pytest.mark.docker
async def test_a_missing_image_fails_the_task_at_init_with_runners_message():
    from executors.errors import ImageNotFound

    with pytest.raises(ImageNotFound, match="runner/no-such-image"):
        await RunnerSandboxEnvironment.task_init("provider", {"image": "runner/no-such-image:latest"})
