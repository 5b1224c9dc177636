"""Each step of the guard pipeline on its own (runner/controller/guards.py), with real policies, rate
limiters, approval rules and protected-path guards; then the order of the steps."""
from __future__ import annotations

import pytest

from runner.controller import guards
from runner.tools.custom import to_spec
from runner.policy import load
from runner.policy.approval import decide
from runner.policy.protect import Guard
from runner.policy.ratelimit import RateLimiter
from runner.tools.schemas import registry

CUSTOM = to_spec({"name": "lint", "kind": "exe", "path": "/workspace/tools/lint", "place": "project",
                  "parameters": {"type": "object", "properties": {"args": {"type": "string"}}}})
GATED_CUSTOM = to_spec({"name": "deploy", "kind": "exe", "path": "/x", "place": "user", "needs_approval": True,
                        "parameters": {"type": "object", "properties": {}}})


def context(tmp_path, *, quota=None, **overrides):
    pol = load("default").effective(overrides={"sandbox.executor": "local", **overrides})
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    guard = Guard(ws, ["keep"])
    return guards.Context(policy=pol, session="s1", limiter=RateLimiter.from_policy(pol.rate_limits),
                          approve=lambda tool, args: decide(pol.approval, tool, args),
                          check_writable=lambda p: guard.check_writable(ws / p),
                          over_quota=lambda adding: quota(adding) if quota else None,
                          allowed=lambda: ["read"])


def call(tool, args=None, spec=None):
    return guards.Call(tool, spec or registry.get(tool), {} if args is None else args)


def refusal(step, ctx, c) -> guards.Refusal:
    with pytest.raises(guards.Refusal) as e:
        step(ctx, c)
    return e.value


# -- gate ----------------------------------------------------------------------------------------
def test_gate_builtin_preset_deny_and_features(tmp_path):
    ctx = context(tmp_path, **{"tools.deny": ["grep"], "features.writes": False})
    guards.gate(ctx, call("read"))
    assert "tools.deny" in str(refusal(guards.gate, ctx, call("grep")))
    assert "features.writes: false" in str(refusal(guards.gate, ctx, call("write")))
    r = refusal(guards.gate, ctx, call("git_log"))
    assert "preset coding" in str(r) and "allowed here: read" in str(r) and r.error_type == "gated"


@pytest.mark.parametrize("overrides, says", [
    ({"features.bash": False}, "features.bash: false"),
    ({"features.custom_tools": False}, "features.custom_tools: false"),
    ({"tools.deny": ["lint"]}, "tools.deny"),
    ({"tools.preset": "readonly"}, "preset readonly runs no commands"),
    ({"tools.preset": "git"}, "name it in tools.allow"),
])
def test_gate_refuses_custom_tools(tmp_path, overrides, says):
    assert says in str(refusal(guards.gate, context(tmp_path, **overrides), call("lint", spec=CUSTOM)))


@pytest.mark.parametrize("overrides", [
    {},  # coding runs commands
    {"tools.preset": "all"},
    {"tools.preset": "readonly", "tools.allow": ["lint"]},
    {"features.bash": False, "features.custom_tools": True},
])
def test_gate_allows_custom_tools(tmp_path, overrides):
    guards.gate(context(tmp_path, **overrides), call("lint", spec=CUSTOM))


def test_a_custom_tool_named_like_a_builtin_is_gated_as_custom(tmp_path):
    shadow = to_spec({"name": "read", "kind": "exe", "path": "/x", "place": "project"})
    assert "features.bash: false" in str(refusal(guards.gate, context(tmp_path, **{"features.bash": False}),
                                                 call("read", spec=shadow)))


# -- args size -----------------------------------------------------------------------------------
def test_args_size_refuses_big_arguments_at_any_depth(tmp_path):
    ctx = context(tmp_path)
    guards.args_size(ctx, call("echo", {"text": "x" * 1000}))
    big = {"a": [{"b": "x" * (guards.ARGS_MAX_BYTES // 2)}, "y" * (guards.ARGS_MAX_BYTES // 2 + 1)]}
    r = refusal(guards.args_size, ctx, call("echo", big))
    assert r.error_type == "validation" and "send the data in parts" in str(r)
    deep: list = []
    for _ in range(200_000):  # far past Python's recursion limit
        deep = [deep]
    r = refusal(guards.args_size, ctx, call("echo", {"text": deep}))
    assert r.error_type == "validation" and "nested more than 64 levels" in str(r)
    ok: list = []
    for _ in range(62):
        ok = [ok]
    guards.args_size(ctx, call("echo", {"text": ok}))  # 64 levels: the object, then 63 lists
    assert "nested" in str(refusal(guards.args_size, ctx, call("echo", {"text": [ok]})))


def test_measure_counts_strings_and_stops_early():
    assert guards.measure({"ab": ["cde", 1, None]}) == 2 + 3 + 8 + 8
    assert guards.measure(["x" * 100] * 1000, stop_after=250) <= 350


# -- validate ------------------------------------------------------------------------------------
def test_validate_makes_args_canonical_for_builtin_and_custom(tmp_path):
    ctx = context(tmp_path)
    c = call("read", {"file_path": "a.txt", "offset": "2"})
    guards.validate(ctx, c)
    assert c.args == {"path": "a.txt", "offset": 2, "limit": None, "raw": False, "max_bytes": None}
    c = call("lint", {"args": "-q"}, spec=CUSTOM)
    guards.validate(ctx, c)
    assert c.args == {"args": "-q"}
    r = refusal(guards.validate, ctx, call("lint", {"nope": 1}, spec=CUSTOM))
    assert r.error_type == "validation" and "nope: unexpected argument" in str(r)
    assert "expected a JSON object" in str(refusal(guards.validate, ctx, call("read", ["a"])))


def test_validate_refuses_git_words_that_are_options(tmp_path):
    r = refusal(guards.validate, context(tmp_path), call("git_pull", {"remote": "--upload-pack=sh"}))
    assert "remote: must not start with '-'" in str(r) and r.error_type == "validation"


# -- rate limit ----------------------------------------------------------------------------------
def test_rate_limit_counts_per_tool_and_session(tmp_path):
    ctx = context(tmp_path, **{"rate_limits.tools": {"lint": {"capacity": 1, "refill_per_second": 0.001}}})
    guards.rate_limit(ctx, call("lint", spec=CUSTOM))
    r = refusal(guards.rate_limit, ctx, call("lint", spec=CUSTOM))
    assert r.error_type == "gated" and r.result().meta["retry_after"] > 0
    guards.rate_limit(ctx, call("read"))


# -- approval ------------------------------------------------------------------------------------
def test_approval_asks_the_rule_only_for_tools_that_need_it(tmp_path):
    ctx = context(tmp_path)  # approval: deny
    guards.approval(ctx, call("lint", spec=CUSTOM))
    assert "approval: deny" in str(refusal(guards.approval, ctx, call("deploy", spec=GATED_CUSTOM)))
    guards.approval(context(tmp_path, approval="allow"), call("deploy", spec=GATED_CUSTOM))


# -- protected paths and quota -------------------------------------------------------------------
def test_protected_paths_for_builtin_writers_only(tmp_path):
    ctx = context(tmp_path)
    (tmp_path / "ws" / "keep").mkdir()
    guards.protected_paths(ctx, call("write", {"path": "a.txt", "content": ""}))
    r = refusal(guards.protected_paths, ctx, call("write", {"path": "keep/a", "content": ""}))
    assert "protected directory" in str(r) and r.error_type == "gated"
    patch = "*** Begin Patch\n*** Add File: keep/b\n+x\n*** End Patch\n"
    assert "protected directory" in str(refusal(guards.protected_paths, ctx, call("apply_patch", {"patch": patch})))
    guards.protected_paths(ctx, call("lint", {"path": "keep/a"}, spec=CUSTOM))  # kernel mounts hold custom tools


def test_a_symlink_loop_is_a_bad_path_not_a_crash(tmp_path):
    ctx = context(tmp_path)
    (tmp_path / "ws" / "loop").symlink_to("loop")
    (tmp_path / "ws" / "keep").mkdir()
    (tmp_path / "ws" / "keep" / "loop").symlink_to("loop")
    # Outside protection a loop passes the step (the sandbox's kernel answers ELOOP as a tool error);
    # inside a protected directory it is refused like any other path there.
    assert guards.protected_paths(ctx, call("write", {"path": "loop/x", "content": ""})) is None
    r = refusal(guards.protected_paths, ctx, call("write", {"path": "keep/loop/x", "content": ""}))
    assert r.error_type == "gated" and "protected directory" in str(r)


def test_quota_sees_what_the_write_adds(tmp_path):
    seen = []
    ctx = context(tmp_path, quota=lambda adding: seen.append(adding) or ("full" if adding > 3 else None))
    guards.quota(ctx, call("write", {"path": "a", "content": "abc"}))
    assert str(refusal(guards.quota, ctx, call("write", {"path": "a", "content": "abcd"}))) == "full"
    guards.quota(ctx, call("lint", {"args": "abcdef"}, spec=CUSTOM))
    assert seen == [3, 4, 0]


def test_once_over_the_quota_only_reading_tools_run(tmp_path):
    """Issue 43, hole 6: the quota step looked at write, edit and apply_patch only, so bash and
    custom tools wrote past it call after call."""
    ctx = context(tmp_path, quota=lambda adding: "over")
    for tool, args, spec in (("bash", {"command": "true"}, None), ("exec", {"command": "true"}, None),
                             ("lint", {"args": ""}, CUSTOM), ("git_commit", {"message": "m"}, None),
                             ("write", {"path": "a", "content": ""}, None)):
        assert str(refusal(guards.quota, ctx, call(tool, args, spec))) == "over", tool
    for tool in sorted(guards.QUOTA_FREE):
        guards.quota(ctx, call(tool, {}))
        assert not registry.get(tool).writes


# -- the pipeline --------------------------------------------------------------------------------
def test_steps_run_in_the_documented_order():
    assert [s.__name__ for s in guards.STEPS] == ["gate", "args_size", "validate", "rate_limit", "approval",
                                                  "protected_paths", "quota"]


def test_first_refusal_wins_and_later_steps_never_run(tmp_path):
    ctx = context(tmp_path, **{"tools.preset": "readonly",
                               "rate_limits.tools": {"lint": {"capacity": 1, "refill_per_second": 0.001}}})
    res = guards.check(ctx, call("lint", {"bogus": 1}, spec=CUSTOM))
    assert res.is_error and "preset readonly" in res.text  # gated before validation
    assert ctx.limiter.acquire("s1", "lint") is None  # the refused call took no token
    ok = call("read", {"file_path": "a"})
    assert guards.check(ctx, ok) is None and ok.args["path"] == "a"


def test_a_tools_facts_are_declared_once_on_its_spec():
    """Every table about built-in tools is derived from their specs: the policy's gates, what
    streams, what may go to a lent shell, the paths a tool writes; the agent's own table (stdlib
    only, in the sandbox) is the specs' agent functions exactly, and what streams there is what
    streams here. Runner.call branches on no tool's name."""
    import ast
    import inspect
    import textwrap

    from runner.agent import server
    from runner.controller import core
    from runner.tools.schemas import registry

    specs = registry.SPECS.values()
    assert registry.agent_table() == {k: tuple(v) for k, v in server.TOOLS.items() if not k.startswith("custom_")}
    assert server.STREAMING == set(registry.streaming())
    assert all((s.agent is None) != (s.on_controller is None) for s in specs), "a tool is run by one side"
    assert registry.gates()["writes"] == {s.name for s in specs if s.writes}
    assert {s.name for s in specs if s.paths_written} == {s.name for s in specs if s.writes and not s.name.startswith(
        "git_")}  # git writes its own files (.git/ is protected as a whole)
    assert registry.written_paths("apply_patch", {"patch": "*** Begin Patch\n*** Add File: a/b\n+x\n*** End Patch"}) \
        == ["a/b"]
    source = textwrap.dedent(inspect.getsource(core.Runner))
    names = {s.name for s in specs}
    compared = [node for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in names
                                                         for c in [node.left, *node.comparators])]
    assert compared == [], [ast.unparse(c) for c in compared]
