"""The Policy model: what may run, where, and with which limits.

Strict everywhere (`extra="forbid"`): an unknown or misspelt key is an error, never silently
ignored. Every field has a default, so an empty file is the hardened default policy and a file
only states what it changes. Cross-field rules live in `_check` validators whose messages name
the field they are about; the loader turns every error into `FILE:LINE: dotted.path: message`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, PrivateAttr,
                      field_validator, model_validator)

from executors.models import DEFAULT_IMAGE, Limits, parse_size

from ..errors import RunnerError

TOOL_PRESETS = ("coding", "readonly", "web", "git", "all", "none")
LOCAL_WARNING = ("executor local: tools run directly on this machine with your user's permissions. "
                 "This is NOT a sandbox: no container, no network isolation, no resource limits.")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _size(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError("a size must be a number of bytes or a string like 512m, not true/false")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, (int, str)):
        raise ValueError(f"a size must be a number of bytes or a string like 512m, got {type(v).__name__}")
    return parse_size(v)


def format_size(n: int | None) -> str | None:
    """536870912 -> '512m': the shortest exact spelling parse_size reads back."""
    if n is None:
        return None
    for unit, mult in (("t", 1024**4), ("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


Size = Annotated[int, BeforeValidator(_size), PlainSerializer(format_size, when_used="json")]
OptSize = Annotated[int | None, BeforeValidator(_size), PlainSerializer(format_size, when_used="json")]


def _tool_name(v: str) -> str:
    if not isinstance(v, str) or not _TOOL_NAME.match(v):
        raise ValueError(f"bad tool name {v!r}: letters, digits, _ . - only")
    return v


def _env_name(v: str) -> str:
    if not isinstance(v, str) or not _ENV_NAME.match(v):
        raise ValueError(f"bad environment variable name {v!r}: letters, digits and _ only, not starting with a digit")
    return v


ToolName = Annotated[str, BeforeValidator(_tool_name)]
EnvName = Annotated[str, BeforeValidator(_env_name)]


def _rel_path(v: Any) -> str:
    """A path relative to the workspace, normalised ('./a//b/' -> 'a/b'); no '..', not absolute."""
    from .protect import normalise

    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be a non-empty path relative to the workspace")
    return normalise(v)  # BadProtectPath is a ValueError: pydantic reports it at the key


RelPath = Annotated[str, BeforeValidator(_rel_path)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# -- sections ------------------------------------------------------------------------------
class Plugin(Strict):
    """A JSON-lines plugin process (see TOOLS.md, custom tools 4)."""

    path: str
    args: list[str] = Field(default_factory=list)


class ToolsPolicy(Strict):
    preset: str = Field(default="coding", description="one of " + ", ".join(TOOL_PRESETS))
    allow: list[ToolName] = Field(default_factory=list, description="tools added to the preset")
    deny: list[ToolName] = Field(default_factory=list, description="tools removed; deny wins over allow")
    folders: list[str] = Field(default_factory=list, description="extra folders of custom tools")
    plugins: list[Plugin] = Field(default_factory=list)
    custom: bool = Field(default=True, description="load custom tools from the system, user, policy and project places")
    entry_points: bool = Field(default=True, description="load the Python tools registered in the runner.tools "
                               "entry-point group (their packages are mounted read-only into the sandbox)")
    allow_shadowing: bool = Field(default=False, description="let a custom tool replace a built-in of the same name")
    describe_timeout: float = Field(default=10.0, gt=0, le=600, description="seconds a custom tool gets to describe "
                                    "itself (in the sandbox) before it is skipped")

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str) -> str:
        if v not in TOOL_PRESETS:
            raise ValueError(f"unknown tool preset {v!r}{_did_you_mean(v, TOOL_PRESETS)}; "
                             f"choose one of {', '.join(TOOL_PRESETS)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "ToolsPolicy":
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"{', '.join(both)} both allowed and denied: keep each tool in one list")
        return self


class Features(Strict):
    """Gates that switch whole families of tools off, whatever the preset says."""

    bash: bool = Field(default=True, description="bash, exec, process")
    network_tools: bool = Field(default=True, description="http_fetch, web_fetch, web_search, git_push, git_pull")
    writes: bool = Field(default=True, description="write, edit, apply_patch and git's writing tools")
    custom_tools: bool | None = Field(default=None, description="custom tools (they run programs); null: on "
                                      "exactly when bash is, true: on even with bash off, false: off")


class SandboxPolicy(Strict):
    executor: str = Field(default="docker", description="the backend: one of runner.backends.names()")
    placement: list[str] = Field(default_factory=list, description="executor swarm: placement constraints, e.g. "
                                 "node.labels.pool==ci")
    lifecycle: Literal["per-session", "per-call"] = "per-session"
    image: str = DEFAULT_IMAGE
    runtime: str | None = Field(default=None, description="OCI runtime, e.g. runsc for gVisor; unset: crun where the engine offers it, else the engine's default")
    workspace: Literal["rw", "ro"] = Field(default="rw", description="how the workspace is mounted")
    pool_size: int | None = Field(default=None, ge=0, description="warm sandboxes kept ready (per-call)")

    @field_validator("executor")
    @classmethod
    def _executor(cls, v: Any) -> str:
        from ..backends import names

        if not isinstance(v, str) or v not in names():
            raise ValueError(f"{v!r} is not allowed{_did_you_mean(v, names())}; use {' | '.join(names())}")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not v.strip() or any(c.isspace() for c in v):
            raise ValueError(f"bad image name {v!r}")
        return v


class OutputCaps(Strict):
    chars: int = Field(default=30_000, gt=0)
    lines: int | None = Field(default=256, gt=0)
    keep: OptSize = Field(default="1g", description="bytes of output a session keeps on the controller's disk "
                          "for `result` (past it, an output's head and tail are still answered; null: no bound)")


class PolicyLimits(Strict):
    cpus: float | None = Field(default=1.0, gt=0)
    memory: OptSize = "1g"
    pids: int | None = Field(default=512, gt=0)
    tmpfs: OptSize = Field(default="256m", description="size of /tmp in the sandbox")
    workspace: OptSize = Field(default=None, description="largest size of the workspace")
    max_write: Size = Field(default="10m", description="largest single write")
    timeout: float = Field(default=120.0, gt=0, description="seconds, when a call names none")
    max_timeout: float = Field(default=1800.0, gt=0, description="seconds; longer requests are capped")
    tool_timeouts: dict[ToolName, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    output: OutputCaps = Field(default_factory=OutputCaps)

    @model_validator(mode="after")
    def _check(self) -> "PolicyLimits":
        if self.timeout > self.max_timeout:
            raise ValueError(f"timeout {self.timeout:g}s is longer than max_timeout {self.max_timeout:g}s")
        over = [f"{k} ({v:g}s)" for k, v in self.tool_timeouts.items() if v > self.max_timeout]
        if over:
            raise ValueError(f"tool_timeouts longer than max_timeout {self.max_timeout:g}s: {', '.join(over)}")
        return self

    def sandbox_limits(self) -> Limits:
        """The executor's Limits (cpus, memory, pids, tmpfs)."""
        return Limits(cpus=self.cpus, memory=self.memory, pids=self.pids, tmpfs=self.tmpfs)

    def timeout_for(self, tool: str, requested: float | None = None) -> float:
        """The timeout a call gets: what it asked for, else the tool's, else the default; capped."""
        t = requested if requested else self.tool_timeouts.get(tool, self.timeout)
        return min(float(t), self.max_timeout)


class MountSpec(Strict):
    source: str = Field(description="host path; relative to the workspace, ~ expanded")
    target: str = Field(description="absolute path in the sandbox")
    mode: Literal["ro", "rw"] = "ro"

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        p = PurePosixPath(v)
        if not p.is_absolute() or ".." in p.parts or str(p) == "/":
            raise ValueError(f"target {v!r} must be an absolute path in the sandbox, not / and without '..'")
        return str(p)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if not v.strip() or "\x00" in v:
            raise ValueError("source must be a non-empty host path")
        return v

    def workspace_rel(self, workspace: str | os.PathLike) -> str | None:
        """The source as a workspace-relative path when the workspace can influence it (a relative
        source, or an absolute one lying in the workspace, lexically or once the operator's own
        links are followed); None for a path of the operator's. Raises UnsafePath for a relative
        source that leaves the workspace ('..')."""
        from ..untrusted.wspath import UnsafePath, relative, touches

        ws = Path(workspace)
        raw = os.path.expanduser(self.source)
        rel = relative(ws, raw)
        if rel is None and not os.path.isabs(raw):
            raise UnsafePath(f"mount source {self.source} is relative to the workspace but leaves it ('..'): "
                             "give an absolute path for a host directory")
        if rel is None:
            rel = relative(ws, os.path.realpath(raw))
            if rel is None and touches(ws, raw):
                raise UnsafePath(f"mount source {self.source} passes through the workspace and out of it again "
                                 "through a link there: refused")
        return rel

    def host_path(self, workspace: str | os.PathLike) -> Path:
        """The host path to mount. A source the workspace can influence is walked component by
        component without following links (an earlier session may have planted `cache -> /`):
        a link on the way raises UnsafePath naming it. The operator's paths are taken as they
        resolve (~ expanded)."""
        from ..untrusted.wspath import inside

        rel = self.workspace_rel(workspace)
        if rel is None:
            return Path(os.path.realpath(os.path.expanduser(self.source)))
        try:
            return inside(workspace, rel) if rel else Path(workspace)
        except FileNotFoundError:
            return Path(workspace) / rel  # the engine says it is missing


def _allow_entry(v: Any) -> str:
    """One network.allow entry in its canonical spelling: the grammar the agent and the egress
    proxy read too (executors/allowlist.py), so what the policy accepts is what a run accepts."""
    from executors.allowlist import canonical

    return canonical(v)


HostPort = Annotated[str, BeforeValidator(_allow_entry)]


class NetworkPolicy(Strict):
    mode: Literal["none", "allowlist"] = "none"
    allow: list[HostPort] = Field(default_factory=list, description="HOST[:PORT] reachable through the egress proxy: a "
                                  "name, *.domain, an IP address or CIDR ([v6] with a port); no port: 80 and 443")
    search_endpoint: str | None = Field(default=None, description="URL web_search queries")
    tls_ca_file: dict[str, str] = Field(default_factory=dict, description="HOST: a CA file (PEM, on the controller) "
                                        "the egress proxy verifies that host's server with when it brokers a secret "
                                        "to it, instead of the host's trust store (private services)")

    @model_validator(mode="after")
    def _check(self) -> "NetworkPolicy":
        if self.mode == "none" and self.allow:
            raise ValueError(f"allow lists {len(self.allow)} host(s) but mode is none: set mode: allowlist "
                             "or remove the list")
        return self


class EnvPolicy(Strict):
    allow: list[EnvName] = Field(default_factory=list, description="host variables passed through by name")
    set: dict[EnvName, str] = Field(default_factory=dict, description="fixed values (not secrets)")


class Secret(Strict):
    """A named secret. Without `hosts` it is injected into the sandbox as an environment variable
    of that name. With `hosts` it is brokered: the variable holds a placeholder unique to the
    session, and the egress proxy puts the real value in its place only in the headers of requests
    to those hosts (runner/policy/broker.py). Its value is read at start-up, never stored in the
    policy and never printed."""

    from_env: EnvName | None = None
    from_file: str | None = None
    required: bool = True
    hosts: list[str] = Field(default_factory=list, description="brokered: the host names whose requests get the "
                             "real value from the egress proxy; the sandbox only ever holds a placeholder")

    @model_validator(mode="after")
    def _one_source(self) -> "Secret":
        if (self.from_env is None) == (self.from_file is None):
            raise ValueError("give exactly one of from_env or from_file")
        return self

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        from executors.allowlist import ip_literal

        out = []
        for h in v:
            name = str(h).strip().rstrip(".").lower()
            if (not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*", name)
                    or ip_literal(name) is not None):
                raise ValueError(f"hosts: {h!r} is not a host name (a name such as api.github.com; no port, "
                                 "no wildcard, no address)")
            if name not in out:
                out.append(name)
        return out

    @property
    def brokered(self) -> bool:
        return bool(self.hosts)

    def resolve(self, name: str, environ: dict[str, str] | None = None,
                workspace: str | os.PathLike | None = None) -> str | None:
        """The value. A file that lies in `workspace` (lexically or through a link) is refused: the
        sandbox can read it, or put a link to any host file in its place for the next session."""
        env = os.environ if environ is None else environ
        if self.from_env is not None:
            val = env.get(self.from_env)
            if val is None and self.required:
                raise SecretUnavailable(f"secret {name}: environment variable {self.from_env} is not set")
            return val
        path = Path(os.path.expanduser(self.from_file))
        if workspace is not None:
            from ..untrusted.wspath import touches

            ws = Path(workspace)
            if touches(ws, path):
                raise SecretUnavailable(f"secret {name}: {path} lies in the workspace {ws}, where the sandbox can read "
                                        "it or leave a link to another file in its place: keep secret files outside "
                                        "the workspace")
        try:
            return path.read_text().rstrip("\r\n")
        except OSError as e:
            if self.required:
                raise SecretUnavailable(f"secret {name}: cannot read {path}: {e.strerror}") from None
            return None


class Bucket(Strict):
    capacity: int = Field(ge=1, description="calls allowed in a burst")
    refill_per_second: float = Field(gt=0, description="tokens added back per second")


class RateLimits(Strict):
    session: Bucket | None = Field(default=None, description="all calls of one session")
    tools: dict[ToolName, Bucket] = Field(default_factory=dict, description="calls of one tool in one session")


class HostCommand(Strict):
    """A command that bash/exec run on the host over SSH instead of in the sandbox, when a call
    is exactly this command (argv[0] == name and the next words == args_prefix)."""

    name: str = Field(description="the program, e.g. git or gh")
    args_prefix: list[str] = Field(default_factory=list, description="first arguments required, e.g. [push]")


class HostTarget(Strict):
    """The SSH host that host commands run on (usually the machine that holds the workspace)."""

    host: str
    port: int = Field(22, ge=1, le=65535)
    user: str
    key_file: str
    known_hosts: str
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for host commands")
    forced_command: bool = Field(False, description="the key's authorized_keys line forces `runner host-shell "
                                 "--allow … --root DIR`: send it only the request (env must then be empty)")
    runner: str = Field("runner", description="without forced_command: the runner command on the host (a path, or "
                        "a name on its PATH); host commands go through its `host-shell`")


class AuditPolicy(Strict):
    enabled: bool = True
    path: str | None = Field(default=None, description="default ~/.local/state/runner/audit.jsonl")
    max_bytes: Size = "10m"
    keep: int = Field(default=5, ge=0, description="rotated files kept: audit.jsonl.1 …")


# -- the policy ----------------------------------------------------------------------------
class Policy(Strict):
    name: str = "custom"
    description: str = ""
    extends: str | None = Field(default=None, description="a preset name or file this one starts from")
    warning: str | None = Field(default=None, description="said loudly by every command that runs tools")
    tenant: str | None = None
    dialect: str | None = Field(
        default=None, description="present another agent system's tool names, arguments and results: one of "
        "runner.tools.dialects.names()")
    tools: ToolsPolicy = Field(default_factory=ToolsPolicy)
    features: Features = Field(default_factory=Features)
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    limits: PolicyLimits = Field(default_factory=PolicyLimits)
    mounts: list[MountSpec] = Field(default_factory=list)
    protect: list[RelPath] = Field(default_factory=list, description="workspace dirs no tool may write")
    protect_git_hooks: bool = Field(default=True, description="protect what makes the host's git run "
                                      "programs: .git/hooks, .git/config, commondir, modules, worktrees; .git stays put")
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)
    env: EnvPolicy = Field(default_factory=EnvPolicy)
    secrets: dict[EnvName, Secret] = Field(default_factory=dict)
    rate_limits: RateLimits = Field(default_factory=RateLimits)
    approval: Literal["deny", "allow", "ask"] = "deny"
    host_commands: list[HostCommand] = Field(default_factory=list,
                                             description="bash/exec calls that are exactly one of these run on host")
    host: HostTarget | None = Field(default=None, description="where host_commands run (SSH)")
    audit: AuditPolicy = Field(default_factory=AuditPolicy)

    _source: str | None = PrivateAttr(default=None)

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, v: Any) -> str | None:
        from ..tools.dialects import names

        if v is not None and (not isinstance(v, str) or v not in names()):
            raise ValueError(f"{v!r} is not a dialect{_did_you_mean(v, names())}; use {' | '.join(names())}")
        return v
    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", v):
            raise ValueError(f"bad tenant name {v!r}: letters, digits, _ . - (at most 64)")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Policy":
        clash = sorted(set(self.secrets) & (set(self.env.set) | set(self.env.allow)))
        if clash:
            raise ValueError(f"{', '.join(clash)} both a secret and an env entry: name each variable once")
        brokered = {n: s for n, s in self.secrets.items() if s.brokered}
        if brokered:
            if self.sandbox.executor != "docker" or self.network.mode != "allowlist":
                raise ValueError(f"secrets {', '.join(sorted(brokered))} have hosts (brokered by the egress proxy): "
                                 "that needs sandbox.executor docker and network.mode allowlist")
            from executors.allowlist import name_allowed, parse

            rules = parse(self.network.allow)
            for n, s in brokered.items():
                for h in s.hosts:
                    if not any(name_allowed(rules, h, port) for e in rules for port in e.ports):
                        raise ValueError(f"secret {n}: host {h} is not in network.allow")
        targets = [m.target for m in self.mounts]
        dup = sorted({t for t in targets if targets.count(t) > 1})
        if dup:
            raise ValueError(f"mounts: two mounts on {', '.join(dup)}")
        return self

    # -- views ------------------------------------------------------------------------------
    @property
    def source(self) -> str | None:
        """The file this policy was loaded from, if any."""
        return self._source

    @property
    def is_sandboxed(self) -> bool:
        return self.sandbox.executor != "local"

    def warnings(self) -> list[str]:
        """What the CLI must say loudly (stderr) before running any tool under this policy."""
        out = []
        if not self.is_sandboxed:
            out.append(LOCAL_WARNING)
            if self.sandbox.workspace == "ro":
                out.append("sandbox.workspace ro cannot be enforced by the local executor: only the "
                           "writing tools are refused, bash can still write")
            if self.network.mode != "none":
                out.append("network rules cannot be enforced by the local executor")
        if self.warning:
            out.append(self.warning)
        return out

    def tool_gate(self, tool: str, preset_tools: set[str] | frozenset[str], *, custom: bool = False) -> str | None:
        """Why `tool` is refused (a message), or None when this policy allows it.
        `preset_tools`: the names in this policy's preset, from the tool registry. `custom`: a
        custom tool, which runs a program: it follows features.custom_tools (by default
        features.bash) and comes with the presets that run commands (those holding bash), else
        it must be named in tools.allow."""
        if tool in self.tools.deny:
            return f"tool {tool} is denied by the policy {self.name} (tools.deny)"
        if custom:
            why = self.custom_tools_gate()
            if why:
                return f"custom tool {tool} is switched off: {why}"
            if tool in self.tools.allow or "bash" in preset_tools:
                return None
            return (f"custom tool {tool} is not allowed by the policy {self.name} (preset {self.tools.preset} runs no "
                    "commands): name it in tools.allow")
        from ..tools.schemas.registry import gates  # each tool's spec says which gates switch it off

        for gate, names in gates().items():
            if tool in names and not getattr(self.features, gate):
                return f"tool {tool} is switched off by the policy {self.name} (features.{gate}: false)"
        if tool in self.tools.allow or tool in preset_tools:
            return None
        return f"tool {tool} is not allowed by the policy {self.name} (preset {self.tools.preset})"

    def custom_tools_gate(self, preset_tools: set[str] | frozenset[str] | None = None) -> str | None:
        """Why this policy switches every custom tool off (a message), or None. A custom tool runs
        a program in the sandbox, like bash: without features.custom_tools it follows features.bash.
        With `preset_tools`, also when no custom tool could be allowed: the preset runs no commands
        and tools.allow names no tool that could be a custom one."""
        if preset_tools is not None and "bash" not in preset_tools and not any(
                self.tools.allow_shadowing or t not in _builtin_names() for t in self.tools.allow):
            return (f"custom tools are not allowed by the policy {self.name} (preset {self.tools.preset} runs no "
                    "commands): name them in tools.allow")
        if not self.tools.custom:
            return f"the policy {self.name} loads no custom tools (tools.custom: false)"
        if self.features.custom_tools is False:
            return f"the policy {self.name} switches custom tools off (features.custom_tools: false)"
        if self.features.custom_tools is None and not self.features.bash:
            return (f"custom tools run programs, and the policy {self.name} switches command execution off "
                    "(features.bash: false); set features.custom_tools: true to allow custom tools without bash")
        return None

    def dump(self) -> dict[str, Any]:
        """A JSON-able dict: sizes as '512m', secrets as their sources (never values)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.dump(), sort_keys=False, default_flow_style=False, allow_unicode=True)

    def resolve_secrets(self, environ: dict[str, str] | None = None,
                        workspace: str | os.PathLike | None = None) -> dict[str, str]:
        """{NAME: value} of every secret that has a value; raises SecretUnavailable for a
        required one that has none, or whose file lies in `workspace`. Feed the values to the
        Redactor as well as the sandbox."""
        out = {}
        for name, s in self.secrets.items():
            val = s.resolve(name, environ, workspace)
            if val:
                out[name] = val
        return out

    def sandbox_env(self, environ: dict[str, str] | None = None,
                    workspace: str | os.PathLike | None = None,
                    placeholders: dict[str, str] | None = None) -> dict[str, str]:
        """The sandbox environment: fixed values, allowed host variables, then secrets by name; a
        brokered secret (one with hosts) as its placeholder from `placeholders`, never its value."""
        env = os.environ if environ is None else environ
        out = dict(self.env.set)
        for k in self.env.allow:
            if k in env:
                out[k] = env[k]
        values = self.resolve_secrets(environ, workspace)
        for name, value in values.items():
            if self.secrets[name].brokered:
                if placeholders is None or name not in placeholders:
                    raise SecretUnavailable(f"secret {name} is brokered (hosts: {', '.join(self.secrets[name].hosts)}) "
                                            "and has no placeholder: its value never enters the sandbox")
                out[name] = placeholders[name]
            else:
                out[name] = value
        return out

    def secret_notes(self) -> list[str]:
        """What `runner policy check` says of each secret: whether its value enters the sandbox."""
        out = []
        for name, s in self.secrets.items():
            if s.brokered:
                out.append(f"secret {name}: brokered: the sandbox holds a placeholder; the egress proxy sends the "
                           f"real value only to {', '.join(s.hosts)}")
            else:
                out.append(f"secret {name}: enters the sandbox as ${name} (no hosts: anything the agent runs can "
                           "read it)")
        return out

    def effective(self, *, protect: list[str] | tuple[str, ...] = (), environ: dict[str, str] | None = None,
                  overrides: dict[str, Any] | None = None,
                  workspace: str | os.PathLike | None = None) -> "Policy":
        """This policy with the command line and environment applied: `--protect` paths,
        RUNNER_PROTECT_DIRS (colon-separated), and dotted overrides such as
        {"limits.memory": "2g", "sandbox.executor": "local"}. Absolute protect paths are accepted
        when `workspace` is given and they lie inside it. Raises PolicyError on a bad one."""
        from pydantic import ValidationError

        from .problems import PolicyError, Problem, from_validation
        from .protect import normalise

        env = os.environ if environ is None else environ
        data = self.model_dump(mode="json")
        problems: list[Problem] = []
        for key, value in (overrides or {}).items():
            try:
                _set_dotted(data, key, value)
            except KeyError as e:
                problems.append(Problem(None, None, key, e.args[0]))
        extra = [("--protect", p) for p in protect]
        extra += [("RUNNER_PROTECT_DIRS", p) for p in env.get("RUNNER_PROTECT_DIRS", "").split(":") if p.strip()]
        for origin, p in extra:
            try:
                norm = normalise(p, workspace)
            except ValueError as e:
                problems.append(Problem(None, None, origin, str(e)))
                continue
            if norm not in data["protect"]:
                data["protect"].append(norm)
        if problems:
            raise PolicyError(problems)
        try:
            pol = Policy.model_validate(data)
        except ValidationError as e:
            raise PolicyError(from_validation(e, Policy, origin="override")) from None
        pol._source = self._source
        return pol


def _builtin_names() -> frozenset[str]:
    from ..tools.schemas.registry import SPECS

    return frozenset(SPECS)


class SecretUnavailable(RunnerError):
    """A required secret has no value (its variable is unset or its file unreadable)."""


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    cur = data
    for i, part in enumerate(parts[:-1]):
        nxt = cur.get(part) if isinstance(cur, dict) else None
        if not isinstance(nxt, dict):
            if isinstance(cur, dict) and part not in cur and i > 0 and _is_free_mapping(parts[:i + 1]):
                nxt = cur[part] = {}
            else:
                raise KeyError(f"unknown setting (no section {'.'.join(parts[:i + 1])})")
        cur = nxt
    if not isinstance(cur, dict):
        raise KeyError("unknown setting")
    cur[parts[-1]] = value


def _is_free_mapping(parts: list[str]) -> bool:
    # Mappings whose keys are names (tools, secrets), where a new entry may be created.
    return ".".join(parts[:-1]) in ("limits.tool_timeouts", "rate_limits.tools", "secrets", "env.set")


def _did_you_mean(word: str, choices) -> str:
    import difflib

    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
