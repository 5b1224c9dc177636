"""runner as an inspect_ai sandbox provider: `sandbox="runner"` or `sandbox=("runner", config)`.

Registered through the `inspect_ai` entry-point group, so inspect finds it once runner is
installed (`pip install runner[inspect]`). This is the only module of runner that imports
inspect_ai. It is a thin adapter: every behaviour inspect asks for (typed file errors, a command
that never started, bounded reads and output, killing on timeout and on cancellation) comes
from the `executors` API; here it is only translated into inspect's exceptions.

Each sample gets a fresh hardened container (runner's defaults: no network, all capabilities
dropped, no-new-privileges, read-only root, non-root user 1000, pids/memory/cpu limits) with a
fresh host directory bind-mounted at /workspace, its working directory; both go when the sample
ends. The config names a policy (its image, limits and runtime are used) or an image. Running a
command as root is refused (SandboxUserUnsupportedError) unless the config sets `root: true`,
a loosening that makes root the sandbox's default user and gives it a writable root and the
capabilities account tools need (see README, "inspect_ai sandbox provider").
"""
from __future__ import annotations

import errno
import posixpath
import tempfile
from pathlib import Path
from typing import Any, Literal, Union, overload

from pydantic import BaseModel, ConfigDict, Field

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUnavailableError

WORKDIR = "/workspace"
PASSWD_MAX = 1024 * 1024  # bytes of the image's /etc/passwd read to find the names of uid 0
# What `root: true` adds to the hardened profile: the account tools (adduser, userdel) write
# /etc and chown a new home. Nothing else is loosened: network, seccomp, no-new-privileges stay.
ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"]


class RunnerSandboxConfig(BaseModel):
    """`sandbox=("runner", RunnerSandboxConfig(...))`, or a dict of these fields, or a string
    (a policy name or file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str | None = Field(default=None, description="a policy preset name or file: its image, limits, runtime")
    image: str | None = Field(default=None, description="the sandbox image (overrides the policy's)")
    root: bool = Field(default=False, description="LOOSENING: the sandbox's default user is root, with a writable "
                       f"root filesystem and the capabilities {', '.join(ROOT_CAPS)}")


def _config(config: SandboxEnvironmentConfigType | None) -> RunnerSandboxConfig:
    if config is None:
        return RunnerSandboxConfig()
    if isinstance(config, RunnerSandboxConfig):
        return config
    if isinstance(config, str):
        return RunnerSandboxConfig(policy=config)
    if isinstance(config, dict):
        return RunnerSandboxConfig(**config)
    if isinstance(config, BaseModel):
        return RunnerSandboxConfig(**config.model_dump())
    raise ValueError(f"runner sandbox: config must be a policy name or file, a dict or RunnerSandboxConfig, "
                     f"not {type(config).__name__}")


def _sandbox_config(cfg: RunnerSandboxConfig, workspace: Path, task_name: str):
    from ..backends.docker import DockerBackend

    fields: dict[str, Any] = {}
    if cfg.policy:
        from ..policy.loader import load

        pol = load(cfg.policy)
        fields.update(image=pol.sandbox.image, limits=pol.limits.sandbox_limits(), runtime=pol.sandbox.runtime)
    if cfg.image:
        fields["image"] = cfg.image
    if cfg.root:  # the engine gives an exec as root capabilities only when the container's user is root
        fields.update(read_only_root=False, cap_add=list(ROOT_CAPS), user="0:0")
    labels = {"runner.role": "inspect", "runner.inspect.task": task_name[:63]}
    return DockerBackend.container_config([(str(workspace), WORKDIR)], **fields, workdir=WORKDIR,
                                          lifecycle="per-session", labels=labels)


def _remove(home: Path) -> None:
    """The sample's directory goes, whatever the sandbox left in it (any depth, no link followed)."""
    import sys

    from ..untrusted.wspath import remove_tree

    why = remove_tree(home)
    if why:
        sys.stderr.write(f"runner inspect sandbox: {why}\n")


def _exec_failure(res, cmd: list[str]) -> Exception | None:
    """The exception inspect expects for a command that never started, else None (an ordinary
    failed result: a missing command, an unknown user, a missing directory)."""
    failure = res.start_failure
    if failure is not None and failure.reason in ("not-executable", "is-directory"):
        return PermissionError(errno.EACCES, failure.message, cmd[0])
    return None


@sandboxenv(name="runner")
class RunnerSandboxEnvironment(SandboxEnvironment):
    """One sample's runner sandbox: a hardened docker container of runner's `executors`."""

    def __init__(self, executor, home: Path, config: RunnerSandboxConfig) -> None:
        super().__init__()
        self.executor = executor
        self.home = home  # holds the workspace mounted at /workspace; removed with the sample
        self.config = config
        self._root_names: set[str] | None = None  # the image's names of uid 0, once asked (_is_root)

    # -- lifecycle ----------------------------------------------------------------------
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return RunnerSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        import anyio

        from ..backends.docker import DockerBackend

        cfg = _config(config)

        def check() -> None:  # fail the task at once, with runner's message, when the image is missing
            sc = _sandbox_config(cfg, Path(tempfile.gettempdir()), task_name)
            DockerBackend.require_image(sc.image)

        await anyio.to_thread.run_sync(check)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        import anyio

        from ..backends.docker import DockerBackend

        cfg = _config(config)
        # The sandbox user (1000) writes the workspace, so it is open to all; its parent is
        # mkdtemp's 0700, so no other user of this machine can reach it.
        home = Path(tempfile.mkdtemp(prefix="runner-inspect-"))
        workspace = home / "workspace"
        workspace.mkdir()
        workspace.chmod(0o777)
        executor = DockerBackend.make_executor(_sandbox_config(cfg, workspace, task_name))
        try:
            await anyio.to_thread.run_sync(executor.start)
        except BaseException:
            await anyio.to_thread.run_sync(executor.stop)
            _remove(home)
            raise
        return {"default": cls(executor, home, cfg)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        import anyio

        for env in environments.values():
            if isinstance(env, RunnerSandboxEnvironment):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(env._close)

    def _close(self) -> None:
        try:  # files the sandbox user made in the workspace are removed by that user
            if self.executor.is_alive():
                self.executor.run(["find", WORKDIR, "-mindepth", "1", "-delete"], timeout=60)
        except Exception:
            pass
        finally:
            self.executor.stop()
            _remove(self.home)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """`inspect sandbox cleanup runner`: runner's own reaper (`runner gc`) does this job."""
        import anyio

        from ..backends.docker import DockerBackend

        def sweep() -> None:
            for c in DockerBackend.sandboxes({"runner.role": "inspect"}):
                if id is None and DockerBackend.orphan_reason(c["Labels"]) is None:
                    continue
                if id is None or c["Id"].startswith(id):
                    DockerBackend.remove_sandbox(c["Id"])

        await anyio.to_thread.run_sync(sweep)

    def default_polling_interval(self) -> float:
        return 0.2

    # -- the contract -------------------------------------------------------------------
    def _path(self, file: str) -> str:
        return file if file.startswith("/") else posixpath.join(WORKDIR, file)

    async def _run(self, fn):
        """Await an executors async call (off the event loop; a cancellation kills the command
        before it goes on), with a dead sandbox reported as inspect's SandboxUnavailableError."""
        from executors.errors import SandboxGone

        try:
            return await fn()
        except SandboxGone as e:
            raise SandboxUnavailableError(f"the runner sandbox is gone: {e}") from e

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        from executors.models import ExecRequest

        if user is not None and not self.config.root and await self._is_root(user):
            raise SandboxUserUnsupportedError(
                f"the runner sandbox runs as a non-root user with no capabilities; exec as {user!r} (uid 0) needs "
                "the loosening `root: true` in the sandbox config")
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        req = ExecRequest(argv=cmd, cwd=cwd, env=env or {}, user=user, timeout=timeout, max_output=limit,
                          stdin=input.encode() if isinstance(input, str) else input)
        res = await self._run(lambda: self.executor.aexec(req))
        stdout = res.stdout.decode("utf-8", errors="replace")
        stderr = res.stderr.decode("utf-8", errors="replace")
        if res.timed_out:
            err = TimeoutError(f"Command timed out after {timeout} seconds")
            if stdout or stderr:
                err.truncated_output = stdout + stderr
            raise err
        if res.output_limited:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stdout + stderr)
        failure = _exec_failure(res, cmd)
        if failure is not None:
            raise failure
        return ExecResult(success=res.exit_code == 0, returncode=res.exit_code, stdout=stdout, stderr=stderr)

    async def _is_root(self, user: str) -> bool:
        """Whether the engine would run an exec as `user` (USER[:GROUP]) with uid 0: "root", a number
        that is 0 as the engine reads it ("0", "00", "+0"), no user before the group (":1000"), or a
        name the image's /etc/passwd gives uid 0 (read once; the root filesystem is read-only
        without `root: true`)."""
        name, colon, _ = user.partition(":")
        if not name:  # ":GROUP": the engine takes uid 0 for the missing user ("": the sandbox's own user)
            return bool(colon)
        try:
            return int(name) == 0
        except ValueError:
            pass
        if name == "root":
            return True
        if self._root_names is None:
            try:
                passwd = await self._run(lambda: self.executor.aget_file("/etc/passwd", max_size=PASSWD_MAX))
            except OSError:  # no passwd: the engine cannot find a user by name either
                passwd = b""
            self._root_names = {f[0] for line in passwd.decode("utf-8", "replace").splitlines()
                                if len(f := line.split(":")) > 2 and f[2].strip().lstrip("+-").isdigit()
                                and int(f[2]) == 0}
        return name in self._root_names

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        await self._run(lambda: self.executor.aput_file(self._path(file), data))

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        from executors.errors import FileTooLarge

        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        try:
            data = await self._run(lambda: self.executor.aget_file(self._path(file), max_size=limit))
        except FileTooLarge:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from None
        return data.decode("utf-8") if text else data
