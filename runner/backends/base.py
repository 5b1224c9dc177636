"""What every backend is made of: a config (pydantic, with a `type` literal) and a Placement.

    config = DockerBackend(egress_network="ci-out")       # or backends.parse({"type": "docker", ...})
    placement = config.placement(setting)                  # one session's answers for this backend
    placement.workspace                                    # '/workspace': the workspace in the sandbox
    placement.make_sandbox(hello, protected, tools)        # a Sandbox (not started) on its executor

The config says how the backend is reached (what the policy cannot say: an SSH target, an egress
network); the Placement answers, for one session, everything the controller needs to know about
where things are: where the workspace is inside the sandbox, where this machine's tool folders
go, how a path of the sandbox maps to the host, which resources the session holds (an egress
proxy, a copy of the tool folders), and how to make the executor. core.py, session.py and
custom.py ask the Placement and never name a backend.
"""
from __future__ import annotations

import posixpath
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, ContextManager, Optional

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class Setting:
    """The facts of one session that every backend works from."""

    workspace: Path  # the host workspace, a real path
    policy: Any  # the effective runner.policy.Policy
    session_id: str
    broker: Any = None  # runner.policy.broker.Broker: the brokered secrets (allowlist mode of docker)
    on_egress: Any = None  # called with each request the egress proxy saw (a dict), to audit it


@dataclass(frozen=True)
class ToolFolder:
    """A folder of this machine that the sandbox needs (a custom tool folder, a plugin's folder,
    a package behind a Python entry point): `host` here, `sandbox` as the sandbox sees it."""

    host: Path
    sandbox: str


class BackendConfig(BaseModel):
    """Base of the backend configs. A subclass sets `type: Literal["name"] = "name"`, holds what
    reaching the backend needs, and implements `placement`."""

    model_config = ConfigDict(extra="forbid")

    type: str

    @classmethod
    def from_given(cls, given: Any = None, **settings: Any) -> "BackendConfig":
        """The config from what the caller handed the Runner: `given` (a config of this backend or
        its dict; None: the defaults) and the Runner's backend keywords (`ssh=`, `egress_network=`),
        of which this config takes the ones that are its fields (None means not given). Raises
        ValueError (pydantic's ValidationError is one) for a config of another backend or a bad field."""
        if isinstance(given, cls):
            return given
        if isinstance(given, BaseModel):
            raise ValueError(f"a {getattr(given, 'type', type(given).__name__)} config was given for the "
                             f"{cls.model_fields['type'].default} backend")
        data = dict(given or {})
        for key, value in settings.items():
            if value is not None and key in cls.model_fields and key != "type":
                data.setdefault(key, value)
        return cls.model_validate(data)

    @classmethod
    def collects_garbage(cls) -> bool:
        """Whether collect_garbage has anything to look at (`runner gc` skips it otherwise). Raises
        nothing."""
        return False

    @classmethod
    def collect_garbage(cls, host: str | None, dry_run: bool) -> list[tuple[str, str, str]]:
        """What processes of runner that died left behind on this backend (`runner gc`, `host`: its
        --host): removed unless dry_run; (id, name or kind, reason) of each. Raises
        EngineUnavailable when what it looks at does not answer."""
        return []

    def placement(self, setting: Setting) -> "Placement":
        """This backend's Placement for one session. Raises nothing: what the backend cannot do is
        refused by Placement.check and Placement.require_engine."""
        raise NotImplementedError


class Placement:
    """One session's answers for one backend. Subclasses override what differs; the defaults
    describe a sandbox that sees this machine's files where they are (the local backend)."""

    #: the sandbox's workspace is another machine's: the project's tool folders are there
    remote: ClassVar[bool] = False
    #: the workspace is isolated by a container (policy.is_sandboxed says the same from the policy)
    isolated: ClassVar[bool] = True

    def __init__(self, config: BackendConfig, setting: Setting) -> None:
        self.config = config
        self.setting = setting

    # -- where things are ---------------------------------------------------------------
    @property
    def workspace(self) -> str:
        """The workspace as the sandbox sees it. Raises nothing."""
        return str(self.setting.workspace)

    @property
    def tools_root(self) -> Optional[str]:
        """Where this machine's tool folders appear in the sandbox (mounted or copied there), or
        None when the sandbox uses them where they are. Raises nothing."""
        return None

    def in_sandbox(self, rel: str) -> str:
        """A workspace-relative path as the sandbox sees it. Raises nothing."""
        return posixpath.join(self.workspace, rel) if rel else self.workspace

    def host_path(self, path: str) -> str:
        """A path a tool names (as the sandbox sees it) as this machine sees it. Raises nothing."""
        return path

    def sandbox_view(self, host: Path) -> Optional[str]:
        """Where a folder of this machine is in the sandbox without shipping it, or None: it
        must be shipped (mounted or copied under tools_root). Raises nothing."""
        return str(host)

    def warnings(self) -> list[str]:
        """What a command that runs tools says on stderr before it does (runner/cli/toolcalls.py). Raises
        nothing."""
        return []

    # -- what the session holds ---------------------------------------------------------
    def check(self, protected: list[str]) -> None:
        """Refuse a workspace this backend cannot protect, before any sandbox: raises RunnerError
        (UnsafePath for a link on the way) saying why."""

    def update_network(self, policy: Any) -> None:
        """Apply a changed network policy (allowlist, brokered secrets' hosts) to a live session's
        shared parts. Raises RunnerError where the backend has no egress to change."""
        from ..errors import RunnerError

        raise RunnerError(f"backend {self.config.type} cannot change the network of a live session")

    def open(self) -> None:
        """Start what the session's sandboxes share (an egress proxy). Raises EngineUnavailable or
        another ExecutorError (EgressUnavailable) when it cannot; nothing is left behind then."""

    def ship(self, tools: list[ToolFolder]) -> Optional[str]:
        """Bring this machine's tool folders to the sandbox's side now (a copy); why it failed,
        or None. A backend that mounts them does so in make_sandbox instead. Raises nothing: a
        failure is the returned reason."""
        return None

    def frozen(self) -> ContextManager:
        """Hold the session's sandboxes still while a host command runs. Raises nothing on entry
        for sandboxes already gone; EngineUnavailable if the engine does not answer."""
        return nullcontext()

    def close(self) -> None:
        """Remove what open() and ship() made. Each step runs even after an earlier one failed.
        Raises nothing: what could not be removed is left for `runner gc`, which finds it by label."""

    def require_engine(self, lifecycle: str) -> None:
        """Raise EngineUnavailable (one line, exit 69) when what makes the sandboxes does not
        answer, for a Runner that makes them only later (per call): it would otherwise report
        each call's failure as a tool error. Raises EngineUnavailable only."""

    def remove_sandboxes(self) -> None:
        """Force-remove this session's sandboxes made by this process now, under a call still
        running (its client gone), so the call ends now rather than at its timeout. Raises nothing:
        the call it ends sees SandboxDied."""

    # -- the sandbox ----------------------------------------------------------------------
    def make_sandbox(self, hello: dict, protected: list[str], tools: list[ToolFolder]) -> Any:
        """A Sandbox (not started) on this backend's executor. `hello` holds what every agent is
        told; this adds where the workspace, protected paths and extra roots are. Raises nothing
        itself: the Sandbox's start raises SandboxDied, or what Executor.start raises."""
        raise NotImplementedError

    def roots(self) -> list[dict]:
        """The policy's extra mounts as the agent sees them: [{path, read_only}]. Raises nothing."""
        return []
