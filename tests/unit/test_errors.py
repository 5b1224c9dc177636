"""One base error class for the controller, one enum of error_type values (the README's contract),
one constant per default. Engine-free."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import runner
from runner.errors import ErrorType, RunnerError, UsageError
from runner.results import ToolResult

ROOT = Path(runner.__file__).resolve().parent
REPO = ROOT.parent


def test_the_controllers_errors_share_one_base():
    from runner.host.repo import Unsafe
    from runner.host.shell import CommandRefused
    from runner.policy.model import SecretUnavailable
    from runner.policy.problems import PolicyError
    from runner.policy.protect import BadProtectPath, ProtectedPath
    from runner.controller.sandbox import NoSandbox, SandboxDied
    from runner.tools.schemas.registry import ToolArgError
    from runner.untrusted.wspath import UnsafePath

    for cls in (UsageError, PolicyError, SecretUnavailable, ProtectedPath, BadProtectPath, UnsafePath, ToolArgError,
                SandboxDied, NoSandbox, CommandRefused, Unsafe):
        assert issubclass(cls, RunnerError), cls
    assert issubclass(UnsafePath, ValueError) and issubclass(BadProtectPath, ValueError)  # still caught as before
    assert PolicyError.exit_code == UsageError.exit_code == 2


def test_every_exception_class_of_runner_is_a_runner_error():
    """A new exception class in runner/ (outside the in-sandbox agent, which is its own program)
    derives from RunnerError or from another class of runner's."""
    found = []
    for f in ROOT.rglob("*.py"):
        if "agent" in f.parts or f.name == "conformance.py":  # the agent is its own program; Skip is test flow
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if set(names) & BUILTIN_ERRORS and not set(names) & {"RunnerError"}:
                    found.append(f"{f.relative_to(REPO)}:{node.lineno} {node.name}({', '.join(names)})")
    assert found == [], found


def test_error_type_is_one_enum_and_no_literal_remains():
    assert [str(t) for t in ErrorType] == ["gated", "validation", "execution", "timeout"]
    from runner.reporting.audit import ERROR_TYPES

    assert ERROR_TYPES == ("gated", "validation", "execution", "timeout")
    literal = re.compile(r"""error_type["']?\s*[=:,\]]\s*\)?\s*["'](gated|validation|execution|timeout)["']""")
    offenders = [f"{f.relative_to(REPO)}:{i}" for f in ROOT.rglob("*.py") for i, line in
                 enumerate(f.read_text().splitlines(), 1) if literal.search(line)]
    assert offenders == []


def test_an_error_result_carries_the_plain_string():
    res = ToolResult.error("no", error_type=ErrorType.GATED)
    assert type(res.meta["error_type"]) is str and res.meta["error_type"] == "gated"
    assert json.loads(res.model_dump_json())["meta"]["error_type"] == "gated"


def test_the_readme_documents_each_error_type():
    text = (REPO / "README.md").read_text()
    for t in ErrorType:
        assert f"| `{t}` |" in text


def test_one_constant_per_default():
    from executors.docker import config
    from executors.models import DEFAULT_IMAGE, OOM_EXIT, TIMEOUT_EXIT
    from runner.cli import exec_cmd
    from runner.policy import Policy

    assert Policy().sandbox.image == config.DEFAULT_IMAGE == DEFAULT_IMAGE
    assert exec_cmd.ExecOptions(cmd=["true"]).image is None  # resolved to DEFAULT_IMAGE when run
    assert (TIMEOUT_EXIT, OOM_EXIT) == (124, 137)
    src = [(f, f.read_text()) for f in ROOT.rglob("*.py") if "agent" not in f.parts and f.name != "images.py"]
    assert [str(f) for f, s in src if '"runner/base:latest"' in s] == []


@pytest.mark.parametrize("preset,call,error_type", [
    ("coding", ("nosuch", {}), "validation"),
    ("readonly", ("nosuch", {}), "gated"),  # it may be a custom tool, which this preset never loads
    ("readonly", ("read", {"path": 3, "nope": 1}), "validation"),
    ("readonly", ("bash", {"command": "true"}), "gated"),
])
def test_results_carry_the_enums_values(tmp_path, preset, call, error_type):
    r = runner.Runner(executor="local", workspace=tmp_path, preset=preset)
    try:
        res = r.call(*call)
        assert res.is_error and res.meta["error_type"] == error_type and type(res.meta["error_type"]) is str
    finally:
        r.close()


def test_one_root_for_every_error_runner_raises():
    """RunnerError is the root of the controller's errors and the executors' alike (defined in
    executors, which import nothing of runner); SandboxGone and SandboxDied are one idea."""
    from executors.errors import (EngineUnavailable, ExecutorError, ImageNotFound, InvalidConfig, RunnerError as Root,
                                  SandboxGone)
    from runner import RunnerError as Documented
    from runner.controller.sandbox import NoSandbox, SandboxDied
    from runner.errors import RunnerError

    assert RunnerError is Root is Documented
    for cls in (ExecutorError, EngineUnavailable, ImageNotFound, InvalidConfig, SandboxGone, NoSandbox):
        assert issubclass(cls, RunnerError), cls
    assert issubclass(SandboxDied, SandboxGone)


def test_every_exception_class_of_the_executors_is_a_runner_error():
    """The executors' own classes too; the exceptions: the egress proxy and the conformance
    battery's Skip, which are programs and test flow of their own, not errors runner raises."""
    found = []
    for f in (REPO / "executors").rglob("*.py"):
        if f.name in ("egress_proxy.py", "conformance.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                if set(names) & BUILTIN_ERRORS and not set(names) & {"RunnerError"}:
                    found.append(f"{f.relative_to(REPO)}:{node.lineno} {node.name}({', '.join(names)})")
    assert found == ["executors/errors.py:11 RunnerError(Exception)"]  # the root itself


BUILTIN_ERRORS = {"Exception", "BaseException", "ValueError", "RuntimeError", "OSError", "TypeError", "KeyError",
                  "LookupError"}


@pytest.mark.parametrize("cls", ["executors.base:Executor", "executors.base:Process", "runner.backends.base:Placement",
                                 "runner.backends.base:BackendConfig"])
def test_every_method_of_the_backend_contracts_says_what_it_raises(cls):
    """As inspect_ai's sandbox interface does: each public method of the executor and placement
    contracts names what it raises (or that it raises nothing) in its docstring."""
    import importlib
    import inspect

    module, _, name = cls.partition(":")
    klass = getattr(importlib.import_module(module), name)
    missing = []
    for attr, value in vars(klass).items():
        if attr.startswith("_") or not (inspect.isfunction(value) or isinstance(value, (property, classmethod))):
            continue
        fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if "raise" not in (fn.__doc__ or "").lower():
            missing.append(attr)
    assert missing == [], f"{cls}: no word on what these raise: {missing}"
