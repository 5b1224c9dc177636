"""Custom tools on the controller: where they are found, how they become ToolSpecs, how a call
to one goes through the same guardrails as a built-in and runs in the sandbox.

Places, in precedence order (a later one wins by name):

    system   runner/system_tools/ (shipped with runner; may be empty)
    user     ~/.config/runner/tools
    policy   the policy's tools.folders, then its tools.plugins
    project  the workspace's tools/, .acai/tools/, .runner/tools/

Nothing here runs a tool: the controller only lists folders. Describing and running happen in
the sandbox (ops custom_describe and custom_run of the agent, runner/toolbox/custom.py). With
docker the non-workspace folders are bind-mounted read-only under /opt/runner-tools/<place>,
and the project folders are protected (read-only) like any protected directory.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from .results import ToolResult
from .schemas.registry import ToolSpec

PROJECT_DIRS = ("tools", ".acai/tools", ".runner/tools")
SANDBOX_TOOLS = "/opt/runner-tools"
SYSTEM_DIR = Path(__file__).resolve().parent / "system_tools"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # what the agents' APIs accept
DESCRIPTION_MAX = 2000
GUIDANCE_MAX = 16000
_PY_TYPES: dict[str, Any] = {"string": str, "number": float, "integer": int, "boolean": bool, "array": list,
                             "object": dict}


def user_dir() -> Path:
    return Path.home() / ".config" / "runner" / "tools"


@dataclass(frozen=True)
class Place:
    place: str  # system | user | policy | project
    host: Path
    sandbox: str  # the folder as the sandbox sees it
    mount: bool  # bind-mount it read-only (docker, outside the workspace)


@dataclass(frozen=True)
class CustomSpec(ToolSpec):
    """A ToolSpec for a custom tool: its declared JSON Schema is what agents see."""

    kind: str = "exe"  # exe | script | plugin | module
    path: str = ""  # in the sandbox
    plugin_args: tuple[str, ...] = ()
    declared: dict = field(default_factory=dict)

    def schema(self) -> dict:
        return dict(self.declared) if self.declared else super().schema()


@dataclass
class Catalog:
    tools: dict[str, CustomSpec] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)


# -- places --------------------------------------------------------------------------------------
def _docker(runner) -> bool:
    return runner.policy.sandbox.executor == "docker"


def places(runner) -> list[Place]:
    """The folders to scan, in precedence order (only those that exist)."""
    pol = runner.policy
    ws = runner.workspace
    out: list[Place] = []
    docker = _docker(runner)

    def add(place: str, host: Path, label: str) -> None:
        try:
            host = host.expanduser()
            if not host.is_absolute():
                host = ws / host
            host = host.resolve()
        except OSError:
            return
        if not host.is_dir():
            return
        if docker:
            if host == ws or host.is_relative_to(ws):
                out.append(Place(place, host, "/workspace/" + host.relative_to(ws).as_posix(), False))
            else:
                out.append(Place(place, host, f"{SANDBOX_TOOLS}/{label}", True))
        else:
            out.append(Place(place, host, str(host), False))

    add("system", SYSTEM_DIR, "system")
    add("user", user_dir(), "user")
    for i, folder in enumerate(pol.tools.folders):
        add("policy", Path(folder), f"policy-{i}")
    for rel in PROJECT_DIRS:
        add("project", ws / rel, "")
    return out


def _plugin_paths(runner) -> list[tuple[dict, Optional[Place]]]:
    """[(plugin entry for the agent, mount or None)]: paths as the sandbox sees them."""
    ws = runner.workspace
    out = []
    for i, pl in enumerate(runner.policy.tools.plugins):
        raw = os.path.expanduser(pl.path)
        host = Path(raw) if os.path.isabs(raw) else ws / raw
        entry = {"path": raw, "args": list(pl.args), "place": "policy"}
        mount = None
        if "/" not in pl.path and not host.exists():
            out.append((entry, None))  # a command name, found on the sandbox's PATH
            continue
        host = host.resolve()
        if not _docker(runner):
            entry["path"] = str(host)
        elif host.is_relative_to(ws):
            entry["path"] = "/workspace/" + host.relative_to(ws).as_posix()
        else:
            mount = Place("policy", host.parent, f"{SANDBOX_TOOLS}/plugin-{i}", True)
            entry["path"] = f"{mount.sandbox}/{host.name}"
        out.append((entry, mount))
    return out


def mounts(runner) -> list:
    """Read-only bind mounts for the docker sandbox (tool folders outside the workspace)."""
    if not runner.policy.tools.custom:
        return []
    from executors.docker import Mount

    ms = [p for p in places(runner) if p.mount] + [m for _, m in _plugin_paths(runner) if m is not None]
    return [Mount(source=str(p.host), target=p.sandbox, read_only=True) for p in ms]


def protected_dirs(policy, workspace: Path) -> list[str]:
    """The project tool folders that exist, workspace-relative: protected like .git/hooks."""
    if not policy.tools.custom:
        return []
    return [rel for rel in PROJECT_DIRS if (workspace / rel).is_dir()]


# -- specs ---------------------------------------------------------------------------------------
def _field_type(prop: dict):
    t = prop.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    if isinstance(prop.get("enum"), list) and prop["enum"] and all(isinstance(v, (str, int, float, bool))
                                                                       for v in prop["enum"]):
        return Literal[tuple(prop["enum"])]
    return _PY_TYPES.get(t, Any)


def model_for(name: str, schema: dict):
    """A pydantic model for a JSON Schema object (its top-level properties), extra keys refused,
    so a validation error names the argument."""
    from pydantic import ConfigDict, Field, create_model

    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields: dict[str, Any] = {}
    for i, (pname, prop) in enumerate(props.items()):
        prop = prop if isinstance(prop, dict) else {}
        typ = _field_type(prop)
        desc = prop.get("description")
        if pname in required and "default" not in prop:
            fields[f"p{i}"] = (typ, Field(..., alias=pname, description=desc))
        else:
            fields[f"p{i}"] = (Optional[typ], Field(prop.get("default"), alias=pname, description=desc))
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return create_model(f"Custom_{safe}", __config__=ConfigDict(extra="forbid", populate_by_name=False), **fields)


def to_spec(t: dict) -> CustomSpec:
    schema = t.get("parameters") if isinstance(t.get("parameters"), dict) else {"type": "object", "properties": {}}
    schema = {"type": "object", **schema}
    return CustomSpec(name=t["name"], description=t.get("description") or "", model=model_for(t["name"], schema),
                      guidance=t.get("guidance") or "", needs_approval=bool(t.get("needs_approval")),
                      source=t.get("place") or "custom", tags=("custom", t.get("kind") or ""), kind=t.get("kind") or "",
                      path=t.get("path") or "", plugin_args=tuple(t.get("plugin_args") or ()), declared=schema)


# -- discovery -----------------------------------------------------------------------------------
def _has_candidates(ps: list[Place]) -> bool:
    for p in ps:
        try:
            if any(not n.startswith(".") and not n.endswith(".md") for n in os.listdir(p.host)):
                return True
        except OSError:
            continue
    return False


def discover(runner) -> Catalog:
    """Describe every custom tool, in the sandbox; resolve precedence and shadowing."""
    from .schemas import registry

    cat = Catalog()
    pol = runner.policy
    if not pol.tools.custom:
        return cat
    if pol.sandbox.executor == "ssh":
        cat.errors.append({"place": "-", "path": "-", "error": "custom tools are not loaded on executor ssh yet"})
        return cat
    ps = places(runner)
    plugins = [e for e, _ in _plugin_paths(runner)]
    if not plugins and not _has_candidates(ps):
        return cat  # nothing to describe: no sandbox needed
    args = {"places": [{"place": p.place, "dir": p.sandbox} for p in ps], "plugins": plugins,
            "timeout": pol.tools.describe_timeout}
    n_jobs = sum(len(os.listdir(p.host)) for p in ps) + len(plugins)
    msg = _sandbox_op(runner, "custom_describe", args, pol.tools.describe_timeout * (n_jobs + 1))
    if msg.get("is_error") or not isinstance(msg.get("content"), dict):
        cat.errors.append({"place": "-", "path": "-", "error": f"describing custom tools failed: {msg.get('content')}"})
        return cat
    found = msg["content"]
    cat.errors += found.get("errors") or []
    for t in sorted(found.get("tools") or [], key=lambda t: t.get("order", 0)):
        name = t.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"bad tool name {str(name)[:80]!r}: use letters, digits, _ and - (at most 64, "
                                        "not starting with a digit)"})
            continue
        t["description"] = str(t.get("description") or "")[:DESCRIPTION_MAX]
        t["guidance"] = str(t.get("guidance") or "")[:GUIDANCE_MAX]
        if name in registry.SPECS and not pol.tools.allow_shadowing:
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"custom tool {name} has the name of a built-in tool and was refused: rename "
                                        "it, or set tools.allow_shadowing: true in the policy"})
            continue
        try:
            spec = to_spec(t)
        except Exception as e:
            cat.errors.append({"place": t.get("place"), "path": t.get("path"), "kind": t.get("kind"),
                               "error": f"bad parameters schema: {e}"})
            continue
        prev = cat.tools.get(name)
        if prev is not None:
            cat.errors.append({"place": prev.source, "path": prev.path, "kind": prev.kind,
                               "error": f"{name} is overridden by {t.get('place')} {t.get('path')}", "overridden": True})
        cat.tools[name] = spec
    return cat


def _sandbox_op(runner, op: str, args: dict, timeout: float) -> dict:
    """One raw agent op in the runner's sandbox (same lifecycle rules as a tool call)."""
    from .sandbox import SandboxDied

    try:
        sandbox = runner._acquire()
    except Exception as e:
        return {"is_error": True, "content": f"could not start a sandbox: {e}"}
    try:
        return sandbox.call(f"{op}-{os.urandom(3).hex()}", op, args, timeout)
    except SandboxDied as e:
        sandbox.close()
        if sandbox is runner._sandbox:
            runner._sandbox = None
        return {"is_error": True, "content": f"the sandbox died: {e}"}
    finally:
        if runner.lifecycle == "per-call":
            sandbox.close()


def changes(old: Catalog | None, new: Catalog) -> dict:
    before = old.tools if old is not None else {}
    after = new.tools

    def sig(s: CustomSpec):
        return (s.description, s.guidance, s.kind, s.path, s.source, s.needs_approval, repr(s.declared))

    return {"added": sorted(set(after) - set(before)), "removed": sorted(set(before) - set(after)),
            "changed": sorted(n for n in set(after) & set(before) if sig(after[n]) != sig(before[n]))}


def report(ch: dict, cat: Catalog) -> str:
    lines = [f"custom tools: {', '.join(sorted(cat.tools)) or '(none)'}"]
    for key in ("added", "removed", "changed"):
        if ch[key]:
            lines.append(f"{key}: {', '.join(ch[key])}")
    if not any(ch.values()):
        lines.append("no change")
    for e in cat.errors:
        if not e.get("overridden"):
            lines.append(f"skipped {e.get('path')} ({e.get('place')}): {e.get('error')}")
    return "\n".join(lines)


# -- calls ---------------------------------------------------------------------------------------
def call(runner, spec: CustomSpec, args: Any, call_id: str, meta: dict) -> ToolResult:
    """The built-ins' guardrails for a custom tool, then custom_run in the sandbox."""
    from .core import ARGS_MAX_BYTES, _args_size
    from .schemas import registry

    tool = spec.name
    if tool in runner.policy.tools.deny:
        return ToolResult.error(f"tool {tool} is denied by the policy {runner.policy.name} (tools.deny)",
                                error_type="gated")
    size = _args_size(args)
    if size > ARGS_MAX_BYTES:
        return ToolResult.error(f"arguments of {tool} are {size} bytes, over runner's limit of {ARGS_MAX_BYTES} bytes",
                                error_type="validation")
    try:
        args = registry.validate_args(tool, args, spec=spec)
    except registry.ToolArgError as e:
        return ToolResult.error(str(e), error_type="validation")
    refused = runner.limiter.acquire(runner.session_id, tool)
    if refused is not None:
        return ToolResult.error(str(refused), error_type="gated", retry_after=refused.retry_after)
    if spec.needs_approval:
        decision = runner._approve(tool, args)
        if not decision.approved:
            return ToolResult.error(decision.message, error_type="gated")
    meta["source"] = spec.source
    meta["kind"] = spec.kind
    op = {"kind": spec.kind, "path": spec.path, "name": tool, "timeout": runner.policy.limits.timeout_for(tool)}
    if spec.kind == "exe":
        op["args"] = args.get("args") or ""
    else:
        op["params"] = {k: v for k, v in args.items() if v is not None}
    if spec.kind == "plugin":
        op["plugin_args"] = list(spec.plugin_args)
    return runner._run_in_sandbox("custom_run", op, call_id)
