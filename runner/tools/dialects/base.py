"""What a dialect is made of: one `Tool` row per tool of the other system, gathered in a `Dialect`.

A row says everything declaratively: the tool's name and description, the pydantic model of its
arguments as the seed spells them (names, defaults, bounds; extra arguments refused), the native
tool it runs, how each argument becomes a native one (`args`: renamed, or renamed and converted by
one of the small converters below), native arguments always sent (`fixed`), and how the answer
comes back (`answer`: the native text as it is, or a JSON object built from the call's arguments,
the native result's meta and its text; `errors`: a seed's error texts for native ones).

Dialect.call is the one hook Runner.call uses: look the name up, validate the dialect's arguments,
translate, run the native call through Runner._call (the whole guard pipeline, exactly as a native
call), shape the answer. Nothing here runs a tool or touches a file.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from ...errors import ErrorType, RunnerError
from ...results import ToolResult


class DialectArgs(BaseModel):
    """Base of a dialect tool's argument model: the seed's names exactly, nothing else."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DialectArgError(RunnerError):
    """Arguments that do not fit the dialect's schema; the message is in the seed's words."""


# -- converters: a dialect argument's value → the native one ------------------------------------
def ms_to_s(v: float) -> float:
    """milliseconds → seconds"""
    return v / 1000.0


def plus_one(v: int) -> int:
    """0-based line → 1-based line"""
    return v + 1


def negate(v: bool) -> bool:
    return not v


def at_least(n: float) -> Callable[[float], float]:
    def conv(v: float) -> float:
        return max(v, n)

    conv.__doc__ = f"raised to at least {n:g}"
    return conv


def to_int(v: Any) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        raise DialectArgError(f"{v!r} is not a process id (a number)") from None


# -- error texts shared by dialects -------------------------------------------------------------
# edit's errors where a dialect calls its arguments old_text/new_text (the Go agent SDK, miclaw):
# in its names, with the seeds' "not found in file" and "found more than once (ambiguous)".
OLD_TEXT_ERRORS = (
    (r"^old_string not found in (.+?): check whitespace and indentation, and read the file again for its current "
     r"text \(first line sought: (.*)\)$", "old_text not found in file {0}: check whitespace and indentation, and "
     "read the file again for its current text (first line sought: {1})"),
    (r"^old_string found (\d+) times in (.+?): ", "old_text found more than once (ambiguous): {0} times in {1}; "
     "include more surrounding lines to make it unique"),
    (r"^old_string and new_string are the same", "old_text and new_text are the same: nothing would change"),
    (r"^old_string is empty", "old_text is empty: to create or replace a whole file use write"),
)


# -- answers: what the agent gets back ------------------------------------------------------------
@dataclass
class Answer:
    """One call's parts, for shaping its answer: the native result, the dialect's arguments (with
    their defaults), the native arguments, and the Runner (the result tool, the sandbox's cwd)."""

    result: ToolResult
    args: dict
    native: dict
    runner: Any
    dialect: "Dialect"
    tool: "Tool"

    @property
    def text(self) -> str:
        return self.result.text


def arg(name: str) -> Callable[[Answer], Any]:
    return lambda a: a.args.get(name)


def meta(key: str, default: Any = None) -> Callable[[Answer], Any]:
    return lambda a: a.result.meta.get(key, default)


def const(value: Any) -> Callable[[Answer], Any]:
    return lambda a: value


def content(a: Answer) -> str:
    return a.text


def workdir(a: Answer) -> str:
    """Where the native tools run: the workspace as the sandbox sees it."""
    return a.runner.placement.workspace


def as_text(a: Answer) -> ToolResult:
    """The native answer as it is."""
    return a.result


def json_object(*, on_error: bool = False, **fields: Callable[[Answer], Any]) -> Callable[[Answer], ToolResult]:
    """A JSON object, each field taken from the answer. A native error stays an error text unless
    on_error (the seed answers an object then too). Every string is redacted before it is encoded,
    so no escaping can hide a secret from the redaction that runs over the whole answer after."""

    def shape(a: Answer) -> ToolResult:
        if a.result.is_error and not on_error:
            return a.result
        if not isinstance(a.result.content, str):  # an image block: no object holds it
            return a.result
        obj = a.runner.redactor.redact_obj({k: get(a) for k, get in fields.items()})
        return ToolResult(content=json.dumps(obj, ensure_ascii=False), is_error=a.result.is_error,
                          meta=a.result.meta)

    shape.fields = tuple(fields)  # for tests and for `runner tools` to say what comes back
    return shape


# -- the tables ----------------------------------------------------------------------------------
Target = "str | tuple[str, Callable[[Any], Any]]"


@dataclass(frozen=True)
class Tool:
    """One tool of the other system. `model` None: runner's own tool under its own name
    (arguments as runner takes them)."""

    name: str
    native: str
    model: type[BaseModel] | None = None
    description: str = ""
    guidance: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)  # dialect field → native name, or (native name, convert)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # native arguments always sent
    answer_only: tuple[str, ...] = ()  # dialect fields the answer uses and the native tool never sees
    answer: Callable[[Answer], ToolResult] = as_text
    errors: tuple[tuple[str, str], ...] = ()  # (regex over a native error, the seed's text: {0}… its groups,
    #                                            {text} the native text, {NAME} the call's arguments)
    missing: str | None = None  # the seed's text for a missing required argument ({arg})
    not_offered_args: Mapping[str, str] = field(default_factory=dict)  # argument → why runner cannot honour it

    def spec(self, native_spec):
        """A ToolSpec for `runner tools` and MCP: the dialect's name, schema and description."""
        from ..schemas.registry import ToolSpec

        if self.model is None:
            return native_spec if native_spec.name == self.name else replace(native_spec, name=self.name)
        return ToolSpec(self.name, self.description or native_spec.description, self.model, self.guidance,
                        writes=native_spec.writes, network=native_spec.network, streams=native_spec.streams,
                        source=self.native)

    def translate(self, args: dict, dialect: "Dialect") -> tuple[dict, dict]:
        """(the dialect's arguments with their defaults, the native arguments), or DialectArgError."""
        if self.model is None:
            return dict(args), dict(args)
        for name, why in self.not_offered_args.items():
            if name in args:
                raise DialectArgError(f"{self.name}: argument {name} is not offered by runner: {why}")
        try:
            model = self.model.model_validate(args)
        except ValidationError as e:
            raise DialectArgError(dialect.invalid_text(self, e)) from None
        values = model.model_dump()
        native = dict(self.fixed)
        for key, value in values.items():
            if value is None or key in self.answer_only:
                continue
            target = self.args.get(key, key)
            if isinstance(target, tuple):
                target, convert = target
                value = convert(value)
            native[target] = value
        return model.model_dump(by_alias=True), native


@dataclass(frozen=True)
class Dialect:
    name: str
    seed: str  # the seed document it follows
    tools: tuple[Tool, ...]
    not_offered: Mapping[str, str] = field(default_factory=dict)  # a seed's tool runner has no body for → why
    invalid: str = "invalid arguments for {tool}: {problems}"
    problems: Mapping[str, str] = field(default_factory=dict)  # pydantic error type ("*": any other) → the seed's text
    custom_prefix: Mapping[str, str] = field(default_factory=dict)  # custom tool kind → prefix of its name
    native_passthrough: bool = False  # runner's own tools under their own names (the seed names no built-ins)
    extras: tuple[str, ...] = ("result",)  # runner tools offered as they are: result pages kept output
    notice: Callable[[Answer], ToolResult] | None = None  # rewrites the truncation notice of a long output
    deviations: tuple[str, ...] = ()  # where the answers differ from the seed, said by `runner tools`

    def table(self) -> dict[str, Tool]:
        """{name: Tool} of every tool this dialect offers (built once)."""
        return self._table

    @cached_property
    def _table(self) -> dict[str, Tool]:
        from ..schemas import registry

        rows = {t.name: t for t in self.tools}
        extra = [s.name for s in registry.all_specs()] if self.native_passthrough else list(self.extras)
        for n in extra:
            rows.setdefault(n, Tool(n, n))
        return rows

    def native_of(self, tool: str) -> str:
        """The native tool a name of this dialect runs (the name itself for anything else)."""
        row = self.table().get(tool)
        return row.native if row is not None else tool

    # -- what the agent sees ------------------------------------------------------------------
    def _customs(self, runner) -> dict[str, str]:
        """{name as shown: native name} of the custom tools the policy allows."""
        allowed = {s.name for s in runner.tools()}
        out = {}
        for name, spec in runner.custom_tools().items():
            if name in allowed:
                out[self.custom_prefix.get(getattr(spec, "kind", ""), "") + name] = name
        return out

    def specs(self, runner) -> list:
        """The specs of this dialect's tools that the policy allows (their native tool allowed),
        then the custom tools (a name a dialect tool has is the dialect tool's)."""
        allowed = {s.name: s for s in runner.tools()}
        denied = set(runner.policy.tools.deny)
        table = self.table()
        out = [t.spec(allowed[t.native]) for t in table.values() if t.native in allowed and t.name not in denied]
        customs = runner.custom_tools()
        for shown, native in self._customs(runner).items():
            if shown not in table and shown not in denied:
                out.append(replace(customs[native], name=shown))
        return out

    # -- the hook in Runner.call ----------------------------------------------------------------
    def call(self, runner, tool: Any, args: Any, call_id: str, meta: dict, on_output=None) -> ToolResult:
        """The answer to `tool(args)` as this dialect's agent expects it. meta (the Runner's, for
        the answer and the audit) gets the dialect, the tool as called and the native tool.
        on_output: Runner.call's, given the native tool's streamed output (run_bash streams as bash)."""
        row = self.table().get(tool) if isinstance(tool, str) else None
        custom = None if row is not None or not isinstance(tool, str) else self._customs(runner).get(tool)
        if row is None and custom is None:
            meta.update(dialect=self.name, dialect_tool=str(tool)[:100])
            return self._unknown(runner, tool)
        native = row.native if row is not None else custom
        meta.update(dialect=self.name, dialect_tool=tool, tool=native)
        refused = self._early(runner, tool, native, args, custom=row is None)
        if refused is not None:
            return refused
        if row is None:
            return runner._call(native, args, call_id, meta, on_output)
        if not isinstance(args, dict):
            return ToolResult.error(f"invalid arguments for {tool}: expected a JSON object", error_type=ErrorType.VALIDATION)
        try:
            dargs, nargs = row.translate(args, self)
        except DialectArgError as e:
            return ToolResult.error(str(e), error_type=ErrorType.VALIDATION)
        res = runner._call(native, nargs, call_id, meta, on_output)
        res.content = runner.redactor.redact_obj(res.content)
        a = Answer(res, dargs, nargs, runner, self, row)
        if res.is_error:
            res = self._error(a)
        if res.meta.get("truncated") and self.notice is not None and isinstance(res.content, str):
            a.result = res = self.notice(a)
        a.result = res
        return row.answer(a)

    def _early(self, runner, tool: str, native: str, args: Any, custom: bool) -> ToolResult | None:
        """The pipeline's first steps (gate, arguments size and depth) before the dialect's own
        validation, so the order of refusals is the native one; a deny may name the dialect's tool.
        The native pipeline runs them again on the translated call."""
        from ...controller.guards import Call, Refusal, args_size
        from ..schemas import registry

        why = (f"tool {tool} is denied by the policy {runner.policy.name} (tools.deny)"
               if tool in runner.policy.tools.deny else
               runner.policy.tool_gate(native, registry.preset(runner.policy.tools.preset), custom=custom))
        if why:
            names = ", ".join(s.name for s in self.specs(runner))
            shown = "" if tool == native else f"{tool} (runner's {native}): "
            return ToolResult.error(f"{shown}{why}; allowed here: {names or '(no tools)'}", error_type=ErrorType.GATED)
        try:
            args_size(None, Call(tool, None, args))
        except Refusal as e:
            return e.result()
        return None

    def _error(self, a: Answer) -> ToolResult:
        """A native error in the seed's words: its own texts where it writes them out, and a
        gate's list of allowed tools in this dialect's names."""
        res, text = a.result, a.result.text
        if res.meta.get("error_type") == "gated" and "; allowed here: " in text:
            names = ", ".join(s.name for s in self.specs(a.runner))
            text = f"{a.tool.name} (runner's {a.tool.native}): {text.split('; allowed here: ')[0]}; allowed here: {names}"
        for pattern, said in a.tool.errors:
            m = re.search(pattern, text)
            if m:
                text = said.format(*m.groups(), **{**a.args, "text": text})
                break
        return ToolResult(content=text, is_error=True, meta=res.meta)

    def _unknown(self, runner, tool: Any) -> ToolResult:
        name = str(tool)[:100]
        if isinstance(tool, str) and tool in self.not_offered:
            return ToolResult.error(f"{name} is not offered by runner's {self.name} dialect: {self.not_offered[tool]}",
                                    error_type=ErrorType.VALIDATION)
        names = ", ".join(s.name for s in self.specs(runner))
        return ToolResult.error(f"unknown tool: {name}. Tools that exist here ({self.name} dialect): {names}",
                                error_type=ErrorType.VALIDATION)

    def invalid_text(self, tool: Tool, e: ValidationError) -> str:
        problems = []
        for err in e.errors():
            where = ".".join(str(x) for x in err["loc"]) or "(arguments)"
            kind = err["type"]
            if kind == "missing" and tool.missing:
                template = tool.missing
            else:
                template = self.problems.get(kind) or {
                    "missing": "{arg}: required", "extra_forbidden": "{arg}: unexpected argument (not in this tool's "
                    "schema)"}.get(kind) or self.problems.get("*", "{arg}: {msg}")
            ctx = {k: v for k, v in (err.get("ctx") or {}).items() if isinstance(v, (int, float, str))}
            said = template.format(arg=where, msg=err["msg"].removeprefix("Value error, "), **ctx)
            if said not in problems:
                problems.append(said)
        return self.invalid.format(tool=tool.name, problems="; ".join(problems))

    def listing_notes(self) -> list[str]:
        """Lines for `runner tools --dialect`: what is not offered, and where answers differ."""
        lines = [f"not offered: {n}: {why}" for n, why in self.not_offered.items()]
        for t in self.tools:
            lines += [f"not offered: {t.name}({a}): {why}" for a, why in t.not_offered_args.items()]
        lines += [f"differs: {d}" for d in self.deviations]
        return lines
