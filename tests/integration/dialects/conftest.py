"""Dialect tests: each seed's documented calls through the real Runner and docker executor.

A table case is written the way the seed writes the call (its names, units and arguments) and
says the answer the seed promises: an exact text, a JSON object, or an error text."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from runner import Runner


@dataclass
class Case:
    id: str
    tool: str
    args: dict
    files: dict[str, str] = field(default_factory=dict)  # written into the workspace first
    content: str | None = None  # the exact answer
    has: tuple[str, ...] = ()  # substrings of the answer
    match: str | None = None  # a regular expression the whole answer matches
    json: dict | None = None  # the answer parsed as JSON equals this
    error: str | None = None  # the call is an error with exactly this text
    error_has: str | None = None  # the call is an error holding this text
    err: bool = False  # the call is an error (its text checked by content, has, match)
    after: Callable[[Path], None] | None = None  # checks of the workspace afterwards

    def __str__(self) -> str:
        return self.id


def check(case: Case, res, ws: Path) -> None:
    text = res.text
    if case.error is not None or case.error_has is not None or case.err:
        assert res.is_error, f"{case.id}: expected an error, got {text!r}"
        if case.error is not None:
            assert text == case.error, f"{case.id}: {text!r}"
        if case.error_has is not None:
            assert case.error_has in text, f"{case.id}: {text!r}"
    else:
        assert not res.is_error, f"{case.id}: {text!r}"
    if case.content is not None:
        assert text == case.content, f"{case.id}: {text!r}"
    for part in case.has:
        assert part in text, f"{case.id}: {part!r} not in {text!r}"
    if case.match is not None:
        assert re.fullmatch(case.match, text, re.S), f"{case.id}: {text!r}"
    if case.json is not None:
        assert json.loads(text) == case.json, f"{case.id}: {text!r}"
    if case.after is not None:
        case.after(ws)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ws")


def run_case(runner: Runner, ws: Path, case: Case):
    for rel, text in case.files.items():
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    res = runner.call(case.tool, case.args)
    check(case, res, ws)
    return res


def dialect_runner(name: str, ws: Path, **kw) -> Runner:
    """A docker Runner in that dialect, every tool allowed, one sandbox for the module."""
    return Runner(executor="docker", workspace=ws, preset="all", dialect=name, **kw)
