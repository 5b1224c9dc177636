"""The guard pipeline: the steps every tool call passes before it runs, built-in and custom alike.

    refused = guards.check(ctx, call)      # None, or the ToolResult that refuses the call

In order (the first refusal wins, later steps never run):

    gate → args size and depth → schema validation → rate limit → approval → protected paths → quota

Each step is a small function `step(ctx, call) -> None` that raises `Refusal`; `validate`
replaces `call.args` with the canonical arguments. The steps read the Runner's state only through
`Context` (the policy, the session, and callables for approval, path checks and quota), so each
one is tested on its own (tests/unit/controller/test_guards.py). A custom tool differs from a built-in in
the gate (`Policy.tool_gate(custom=True)`: custom tools run programs, so they follow
features.bash unless features.custom_tools says otherwise, and come with the presets that run
commands) and in the path step, which only concerns the built-in writing tools (a custom tool
writes like bash does: the read-only mounts hold it). The quota step holds for every call that
may write, bash and custom tools included.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ErrorType, RunnerError
from ..reporting import observe
from ..results import ToolResult

ARGS_MAX_BYTES = 32 * 1024 * 1024
WRITING_TOOLS = frozenset({"write", "edit", "apply_patch"})  # built-ins whose paths are checked before they run
# Built-ins that write nothing in the workspace: the only calls the quota lets through once it is
# exceeded (every other one, bash, exec and custom tools among them, may write).
QUOTA_FREE = frozenset({"read", "ls", "read_dir", "glob", "find", "grep", "result", "echo", "get_time",
                        "memory_search", "memory_get"})


class Refusal(RunnerError):
    """A guard step refused the call: the message says why and what to do."""

    def __init__(self, message: str, error_type: ErrorType = ErrorType.GATED, **meta: Any) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.meta = meta

    def result(self) -> ToolResult:
        return ToolResult.error(str(self), error_type=self.error_type, **self.meta)


@dataclass
class Call:
    """One call on its way through the pipeline. `spec` is the tool's ToolSpec (a custom tool's
    CustomSpec has a source other than builtin); `args` become canonical after `validate`."""

    tool: str
    spec: Any
    args: Any

    @property
    def builtin(self) -> bool:
        return self.spec.source == "builtin"


@dataclass
class Context:
    """What the steps consult. `approve(tool, args)` answers a policy.approval.Decision;
    `check_writable(path)` raises ProtectedPath (or OSError/ValueError for a bad path);
    `over_quota(adding_bytes)` answers why a write is refused, or None; `allowed()` names the tools
    this policy allows (for the gate's message)."""

    policy: Any
    session: str
    limiter: Any
    approve: Callable[[str, dict], Any]
    check_writable: Callable[[str], None]
    over_quota: Callable[[int], str | None]
    allowed: Callable[[], list[str]] = field(default=lambda: [])


def gate(ctx: Context, call: Call) -> None:
    """The policy's allow/deny lists, feature gates and preset (custom tools included)."""
    from ..tools.schemas import registry

    why = ctx.policy.tool_gate(call.tool, registry.preset(ctx.policy.tools.preset), custom=not call.builtin)
    if why:
        names = ", ".join(ctx.allowed())
        raise Refusal(f"{why}; allowed here: {names or '(no tools)'}")


def args_size(ctx: Context, call: Call) -> None:
    """Arguments bigger than ARGS_MAX_BYTES, or nested deeper than boundedjson.MAX_DEPTH (the
    validation, redaction and audit after this step walk them), are refused first."""
    from ..untrusted.boundedjson import MAX_DEPTH, depth

    size = measure(call.args, stop_after=ARGS_MAX_BYTES)
    if size > ARGS_MAX_BYTES:
        raise Refusal(f"arguments of {call.tool} are over runner's limit of {ARGS_MAX_BYTES} bytes: send the data "
                      "in parts (write, then edit to append)", error_type=ErrorType.VALIDATION)
    if depth(call.args, stop_after=MAX_DEPTH) > MAX_DEPTH:
        raise Refusal(f"arguments of {call.tool} are nested more than {MAX_DEPTH} levels deep",
                      error_type=ErrorType.VALIDATION)


def validate(ctx: Context, call: Call) -> None:
    """The tool's pydantic model (a custom tool's is built from its declared JSON Schema)."""
    from ..tools.schemas import registry

    try:
        call.args = registry.validate_args(call.tool, call.args, spec=call.spec)
    except registry.ToolArgError as e:
        raise Refusal(str(e), error_type=ErrorType.VALIDATION) from None


def rate_limit(ctx: Context, call: Call) -> None:
    refused = ctx.limiter.acquire(ctx.session, call.tool)
    if refused is not None:
        raise Refusal(str(refused), retry_after=refused.retry_after)


def approval(ctx: Context, call: Call) -> None:
    """Tools marked needsApproval go through the policy's rule (deny, allow, ask on a terminal)."""
    if call.spec.needs_approval:
        decision = ctx.approve(call.tool, call.args)
        if not decision.approved:
            raise Refusal(decision.message)


def protected_paths(ctx: Context, call: Call) -> None:
    """The paths a built-in writing tool would write must not be in a protected directory."""
    from ..policy.protect import ProtectedPath
    from ..tools.schemas import registry

    if not call.builtin or call.tool not in WRITING_TOOLS:
        return
    try:
        for path in registry.written_paths(call.tool, call.args):
            ctx.check_writable(path)
    except ProtectedPath as e:
        raise Refusal(str(e)) from None
    except (OSError, ValueError, RuntimeError) as e:  # RuntimeError: a symlink loop
        raise Refusal(f"bad path for {call.tool}: {e}", error_type=ErrorType.VALIDATION) from None


def quota(ctx: Context, call: Call) -> None:
    """limits.workspace, checked before every call that may write (all but QUOTA_FREE's): what
    the workspace holds now, so what a bash command or a custom tool wrote refuses the next call."""
    if call.builtin and call.tool in QUOTA_FREE:
        return
    adding = call.args.get("content") or call.args.get("patch") if call.builtin and call.tool in WRITING_TOOLS else ""
    over = ctx.over_quota(len(str(adding or "").encode()))
    if over:
        raise Refusal(over)


STEPS: tuple[Callable[[Context, Call], None], ...] = (gate, args_size, validate, rate_limit, approval, protected_paths,
                                                       quota)
_SPANS = tuple(("guard." + step.__name__.lstrip("_"), step) for step in STEPS)  # (named once, not per call)


def check(ctx: Context, call: Call) -> ToolResult | None:
    """Run the steps in order; the ToolResult of the first refusal, or None to go ahead."""
    try:
        for name, step in _SPANS:
            with observe.span(name):
                step(ctx, call)
    except Refusal as e:
        return e.result()
    return None


def measure(obj: Any, stop_after: int | None = None) -> int:
    """Roughly the bytes of a call's arguments: the lengths of its strings (8 for anything else),
    walked without recursion (any depth is fine), stopping once past stop_after."""
    total, stack = 0, [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            total += len(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            total += 8
        if stop_after is not None and total > stop_after:
            break
    return total
