"""`runner tools --dialect NAME --format json` against the seed documents themselves: every
argument a document gives a tool (tests/integration/dialects/seeddocs.py parses its lists, tables and Go
structs) is in the printed schema with the document's type, required flag, default, unit and
limits, or is one the dialect lists as not offered (with why); no argument is printed that the
document does not give. The tools runner has no body for are listed as not offered."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from runner.tools import dialects

from . import seeddocs
from .seeddocs import NONE

# JSON types a document's type may be printed as: a Go SDK "number" a whole number takes (offset,
# limit, max_results) is an integer in runner's schema, which every number the document shows fits.
TYPES = {"number": ("number", "integer")}


@cache
def printed(dialect: str, tmp: str) -> dict[str, dict]:
    """{tool: parameters schema} as `runner tools --dialect D --format json` prints them."""
    pol = Path(tmp) / "all.yaml"
    pol.write_text("extends: default\ntools: {preset: all}\n")
    p = subprocess.run([sys.executable, "-m", "runner", "tools", "--dialect", dialect, "--format", "json",
                        "--policy", str(pol), "--workspace", tmp], capture_output=True, timeout=300,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stderr.decode()
    return {s["name"]: s["parameters"] for s in json.loads(p.stdout)}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("schemas"))


def _prop_type(prop: dict) -> set:
    """The JSON types a property takes (an Optional is anyOf [T, null]; null is left out)."""
    if "type" in prop:
        return {prop["type"]} if isinstance(prop["type"], str) else set(prop["type"]) - {"null"}
    return {t for alt in prop.get("anyOf", []) for t in _prop_type(alt)} - {"null"}


def _bound(prop: dict, key: str):
    if key in prop:
        return prop[key]
    return next((alt[key] for alt in prop.get("anyOf", []) if key in alt), None)


CASES = [(d, name) for d in ("forgekeeper", "go-agent", "miclaw", "ah") for name in seeddocs.parse(d)]


@pytest.mark.parametrize("dialect,tool", CASES, ids=lambda x: x)
def test_printed_schema_is_the_documents(dialect, tool, tmp):
    seed = seeddocs.parse(dialect)[tool]
    d = dialects.get(dialect)
    if tool in d.not_offered:  # a tool runner has no body for: not printed, and said why
        assert tool not in printed(dialect, tmp), f"{tool} is printed and listed as not offered"
        assert f"not offered: {tool}: {d.not_offered[tool]}" in d.listing_notes()
        return
    schema = printed(dialect, tmp)[tool]
    props, required = schema.get("properties", {}), set(schema.get("required", []))
    row = d.table()[tool]
    not_offered = row.not_offered_args
    assert set(props) <= set(seed.params), f"{dialect}.{tool}: prints {sorted(set(props) - set(seed.params))}, " \
                                           "which the document does not give"
    for name, p in seed.params.items():
        if name in not_offered:
            assert name not in props
            continue
        assert name in props, f"{dialect}.{tool}: the document's {name} ({p.words}) is not in the schema"
        prop = props[name]
        if p.type is not None:
            assert _prop_type(prop) <= set(TYPES.get(p.type, (p.type,))) and _prop_type(prop), (
                f"{dialect}.{tool}.{name}: printed {prop}, the document says {p.type}")
        assert (name in required) == p.required, f"{dialect}.{tool}.{name}: required {name in required}, " \
                                                 f"the document: {p.words}"
        if p.default is not NONE:
            assert prop.get("default") == p.default, f"{dialect}.{tool}.{name}: default {prop.get('default')!r}, " \
                                                     f"the document: {p.default!r}"
        if p.max_length is not None:
            key = "maxItems" if p.type == "array" else "maxLength"
            assert _bound(prop, key) == p.max_length, f"{dialect}.{tool}.{name}: {key} {_bound(prop, key)}"
        if p.maximum is not None:
            assert _bound(prop, "maximum") == p.maximum, f"{dialect}.{tool}.{name}: maximum {_bound(prop, 'maximum')}"
        if p.minimum is not None:
            low = _bound(prop, "minimum")
            if low != p.minimum:  # else a lower value is raised to the document's minimum (miclaw's exec)
                target = row.args.get(name, name)
                target = target[0] if isinstance(target, tuple) else target
                small = {**{k: "x" for k in required}, name: 1}
                assert row.translate(small, d)[1][target] == p.minimum, f"{dialect}.{tool}.{name}: minimum {low}"
        if p.enum is not None:
            assert set(_bound(prop, "enum") or []) == set(p.enum), f"{dialect}.{tool}.{name}: enum {prop}"
        if p.unit is not None:
            said = {"ms": "milliseconds", "s": "seconds"}[p.unit]
            assert said in prop.get("description", ""), f"{dialect}.{tool}.{name}: the unit ({said}) is not said"


@pytest.mark.parametrize("dialect", ["forgekeeper", "go-agent", "miclaw", "ah"])
def test_every_documented_tool_is_offered_or_said_why_not(dialect, tmp):
    d = dialects.get(dialect)
    shown = printed(dialect, tmp)
    for tool in seeddocs.parse(dialect):
        assert (tool in shown) != (tool in d.not_offered), f"{dialect}: {tool}"
    assert set(shown) - set(seeddocs.parse(dialect)) == set(d.extras), f"{dialect}: tools the document has not"


def test_byte_limits_the_document_states_are_the_policys(tmp):
    """Forgekeeper's write_file content (max 10485760 bytes) is bounded by the policy's
    limits.max_write, whose default is that many bytes; its write_repo_file is not offered."""
    from runner.policy.model import Policy

    fk = seeddocs.parse("forgekeeper")
    assert fk["write_file"].params["content"].max_bytes == Policy().limits.max_write


def test_acai_describe_answer_is_the_printed_schema(tmp, docker_client):
    """The document's example dynamic tool, put in .acai/tools as the document places it: its
    describe answer (name, parameter type, required, default) is what `runner tools` prints,
    under acai's `dynamic-` name."""
    name, source = seeddocs.acai_example_tool()
    ws = Path(tmp) / "acai-ws"
    (ws / ".acai" / "tools").mkdir(parents=True, exist_ok=True)
    (ws / ".acai" / "tools" / name).write_text(source)
    pol = ws.parent / "acai.yaml"
    pol.write_text("extends: default\ntools: {preset: all}\nsandbox: {image: \"runner/node:latest\"}\n")
    p = subprocess.run([sys.executable, "-m", "runner", "tools", "--dialect", "acai", "--format", "json",
                        "--policy", str(pol), "--workspace", str(ws), "--executor", "docker"], capture_output=True,
                       timeout=300, env=dict(os.environ))
    assert p.returncode == 0, p.stderr.decode()
    seed = seeddocs.acai_described()
    got = {s["name"]: s["parameters"] for s in json.loads(p.stdout)}
    assert seed.name in got, sorted(got)
    schema = got[seed.name]
    assert set(schema["properties"]) == set(seed.params)
    for pname, param in seed.params.items():
        prop = schema["properties"][pname]
        assert _prop_type(prop) == {param.type} and prop.get("default") == param.default
        assert (pname in schema.get("required", [])) == param.required


def test_the_copies_are_the_seeds():
    """tests/integration/dialects/seeds/ are the seed documents as given: equal to ../shared/seeds/ where a
    checkout has that folder beside it (CI's copy of shared/), and every one is there."""
    shared = Path(__file__).resolve().parents[4] / "shared" / "seeds"
    assert sorted(p.name for p in seeddocs.SEEDS.glob("*.txt")) == sorted(seeddocs.FILES.values())
    if not shared.is_dir():
        pytest.skip(f"no {shared} beside this checkout")
    for name in seeddocs.FILES.values():
        assert (seeddocs.SEEDS / name).read_bytes() == (shared / name).read_bytes(), name
    assert {d.seed for d in map(dialects.get, dialects.names())} == set(seeddocs.FILES.values())


@pytest.mark.parametrize("dialect", dialects.names())
def test_each_dialect_has_a_page_naming_what_differs(dialect):
    """docs/dialects/NAME.md names every tool and argument the dialect does not offer and every
    example or error the replay cannot hold (the lists in test_seed_examples.py), and README's
    dialect section links it."""
    from . import test_seed_examples as ex

    root = Path(__file__).resolve().parents[3]
    page = (root / "docs" / "dialects" / f"{dialect}.md").read_text()
    d = dialects.get(dialect)
    assert d.seed in page
    for tool in d.not_offered:
        assert f"`{tool}`" in page, f"{dialect}.md does not name {tool}, which is not offered"
    for row in d.tools:
        for name in row.not_offered_args:
            assert f"`{name}`" in page, f"{dialect}.md does not name {row.name}'s {name}, which is not offered"
    cannot = {"forgekeeper": ex.FK_CANNOT, "go-agent": ex.GO_CANNOT, "acai": ex.ACAI_CANNOT}.get(dialect, {})
    for case in cannot:
        assert case in page, f"{dialect}.md does not list {case!r}, which cannot be replayed"
    assert f"(docs/dialects/{dialect}.md)" in (root / "README.md").read_text()
