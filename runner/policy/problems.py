"""A policy's problems: each one where it is (file, line, dotted key) and what to do about it.

Shared by the model (overrides, `Policy.effective`) and the loader (files); imports neither.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..errors import RunnerError


@dataclass(frozen=True)
class Problem:
    file: str | None
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (f"{self.file}: " if self.file else "")
        return f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"


class PolicyError(RunnerError):
    """A policy that cannot be used; `problems` lists each one, str() is one per line."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(None, None, "", problems)]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's type tags (e.g. 'function-before[...]', 'int') from a location."""
    return tuple(p for p in loc if isinstance(p, int) or not re.search(r"[\[\]()]", p) or p == "[key]")


def _dotted(loc: tuple) -> str:
    out = ""
    for p in loc:
        if p == "[key]":
            continue
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def from_validation(err: ValidationError, root: type, locate: Callable[[tuple, bool], tuple] | None = None,
                    file: str | None = None, origin: str | None = None) -> list[Problem]:
    """pydantic's errors of validating `root` (the Policy model) as Problems. `locate(loc,
    want_key)` answers (file, line) of a location (the loader's YAML layers); `origin` names where
    values came from when no file does (e.g. "override")."""
    problems: list[Problem] = []
    seen = set()
    for e in err.errors(include_url=False):
        loc = _clean_loc(tuple(e["loc"]))
        kind = e["type"]
        want_key = kind == "extra_forbidden"
        lookup = loc if kind != "missing" else loc[:-1]
        fname, line = locate(lookup, want_key) if locate is not None else (None, None)
        msg = _message(e, loc, root)
        if origin and not fname:
            msg = f"{msg} ({origin})"
        p = Problem(fname or file, line, _dotted(loc), msg)
        if str(p) not in seen:
            seen.add(str(p))
            problems.append(p)
    return problems


def _unwrap(t: Any) -> Any:
    while True:
        origin = typing.get_origin(t)
        if origin is typing.Annotated:
            t = typing.get_args(t)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) != 1:
                return t
            t = args[0]
        else:
            return t


def _model_at(root: type, loc: tuple):
    t: Any = root
    for part in loc:
        t = _unwrap(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            f = t.model_fields.get(part) if isinstance(part, str) else None
            if f is None:
                return None
            t = f.annotation
        elif typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        elif typing.get_origin(t) is list:
            t = typing.get_args(t)[0]
        else:
            return None
    t = _unwrap(t)
    return t if isinstance(t, type) and issubclass(t, BaseModel) else None


def _message(e: dict, loc: tuple, root: type) -> str:
    kind, msg, value = e["type"], e["msg"], e.get("input")
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        if loc and loc[-1] == "[key]":
            return "unknown key"
        names = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6) if loc else []
        if close:
            return f"unknown key (did you mean {close[0]}?)"
        return "unknown key" + (f"; known keys: {', '.join(names)}" if names else "")
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{value!r} is not allowed{hint}; use {' | '.join(choices)}"
    if kind in ("value_error", "assertion_error"):
        return re.sub(r"^(Value|Assertion) error, ", "", msg)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return f"{msg[0].lower()}{msg[1:]} (got {value!r})"
    return f"{msg[0].lower()}{msg[1:]} (got a {type(value).__name__})"
