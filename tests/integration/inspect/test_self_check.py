"""inspect_ai's own conformance battery (inspect_ai/util/_sandbox/self_check.py, 44 checks in
the pinned 0.3.285) against the runner provider on the real engine, with the hardened defaults.

Every check passes but one, which cannot with the hardened defaults and is held to failing
for exactly that reason: test_exec_as_user creates a user as root, and the hardened sandbox
refuses root (SandboxUserUnsupportedError). With the `root: true` loosening it passes too
(test_exec_as_user_with_the_root_loosening below)."""
from __future__ import annotations

import pytest
from inspect_ai.util import SandboxUserUnsupportedError
from inspect_ai.util._sandbox import self_check
from inspect_ai.util._sandbox.self_check import *  # noqa: F401,F403

from runner.servers.inspect import RunnerSandboxConfig, RunnerSandboxEnvironment

pytestmark = pytest.mark.anyio

NEEDS_ROOT = {"test_exec_as_user": "adds a user as root; the hardened sandbox refuses root (root: true loosens it)"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _env(config: RunnerSandboxConfig):
    envs = await RunnerSandboxEnvironment.sample_init("self-check", config, {})
    return envs


@pytest.fixture
async def sandbox_env(request, no_leaks):
    name = request.node.originalname
    if name in NEEDS_ROOT:
        request.applymarker(pytest.mark.xfail(reason=NEEDS_ROOT[name], raises=SandboxUserUnsupportedError,
                                                  strict=True))
    envs = await _env(RunnerSandboxConfig())
    try:
        yield envs["default"]
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("self-check", None, envs, False)


def test_the_battery_is_the_pinned_one():
    """A new inspect_ai version brings new checks: re-read them and update the README count."""
    assert len(self_check.__all__) == 44


async def test_exec_as_user_with_the_root_loosening(no_leaks):
    envs = await _env(RunnerSandboxConfig(root=True))
    try:
        await self_check.test_exec_as_user(envs["default"])
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("self-check", None, envs, False)


async def test_root_is_refused_by_default_and_the_default_user_is_not_root(no_leaks):
    envs = await _env(RunnerSandboxConfig())
    env = envs["default"]
    try:
        assert (await env.exec(["id", "-u"])).stdout.strip() == "1000"
        for user in ("root", "0"):
            with pytest.raises(SandboxUserUnsupportedError, match="root: true"):
                await env.exec(["id", "-u"], user=user)
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("self-check", None, envs, False)


async def test_root_is_refused_under_every_spelling_the_engine_reads_as_uid_0(no_leaks):
    """Only "root", "0", "0:0" and "root:root" were refused: "0:1000" or "root:1000" (root with
    another group), "00" or "+0" (the engine reads a number as Go's Atoi does) and ":1000" (no
    user: the engine's default, uid 0) ran the command as uid 0 without the `root: true` loosening."""
    envs = await _env(RunnerSandboxConfig())
    env = envs["default"]
    try:
        for user in ("0:1000", "root:1000", "00", "+0", ":1000", "0:0", "root"):
            with pytest.raises(SandboxUserUnsupportedError, match="root: true"):
                res = await env.exec(["id", "-u"], user=user)
                pytest.fail(f"ran as {user!r}: uid {res.stdout.strip()}")
        assert (await env.exec(["id", "-u"], user="1000:0")).stdout.strip() == "1000"  # a group is no uid
        assert (await env.exec(["id", "-un"], user="nobody")).stdout.strip() == "nobody"
    finally:
        await RunnerSandboxEnvironment.sample_cleanup("self-check", None, envs, False)
