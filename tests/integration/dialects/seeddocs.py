"""The seed documents (tests/integration/dialects/seeds/, copies of ../shared/seeds) parsed into what the
dialect tests check: each tool's documented arguments (name, JSON type, required, default, unit,
bounds), its example calls, its documented responses and its "common errors".

Nothing here is retyped from a document: every case comes out of the document's own list,
table, Go struct or example block, so a case cannot drift from its source. A document whose
layout changes so that a tool's arguments or examples cannot be found fails the parse loudly
(`parse()` asserts it found what the document's table of contents names).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parent / "seeds"
FILES = {"ah": "000_22272b18b1a2ac99.txt", "acai": "001_9fe2d12037aa2cd1.txt", "forgekeeper": "002_7bf06e9fb512a7e5.txt",
         "go-agent": "003_1402d700c332f8f9.txt", "miclaw": "004_855e890a003b36b5.txt"}
NONE = object()  # no default stated


@dataclass
class Param:
    name: str
    type: str | None = None  # JSON Schema type; None: the document gives none
    required: bool = False
    default: Any = NONE  # a literal default the document states
    unit: str | None = None  # "ms" or "s" for a duration
    max_length: int | None = None  # characters (string) or items (array)
    max_bytes: int | None = None
    minimum: float | None = None
    maximum: float | None = None
    enum: list | None = None
    words: str = ""  # the document's own line, for messages


@dataclass
class Example:
    args: dict
    response: Any = NONE  # the documented answer (parsed JSON), if the document shows one


@dataclass
class SeedTool:
    dialect: str
    name: str
    params: dict[str, Param] = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the "common errors" texts
    returns: Any = NONE  # the documented shape of the answer (Forgekeeper's Returns: object)
    notes: str = ""  # the section's prose (defaults and units stated there)


def text(dialect: str) -> str:
    return (SEEDS / FILES[dialect]).read_text(encoding="utf-8")


def _sections(doc: str, level: str) -> list[tuple[str, str]]:
    """(heading, body) of each heading of exactly that level ('###' or '####')."""
    parts = re.split(rf"^{level} (.+)$", doc, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts), 2)]


def _blocks(body: str, lang: str = "") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", body, flags=re.S)


def _after(body: str, label: str) -> str | None:
    """The first fenced block after a `**label:**` line, if one follows before the next label."""
    m = re.search(rf"\*\*{re.escape(label)}:\*\*[^\n]*\n+```\w*\n(.*?)```", body, flags=re.S)
    return m.group(1) if m else None


def _json(block: str) -> Any:
    """A documented JSON block; `...` placeholders in a list (Forgekeeper's refresh_tools) dropped."""
    return json.loads(re.sub(r",\s*\.\.\.\s*\]", "]", block))


def _literal(word: str) -> Any:
    word = word.strip().strip("`")
    if re.fullmatch(r"'[^']*'|\"[^\"]*\"", word):
        return word[1:-1]
    if word in ("true", "false"):
        return word == "true"
    if re.fullmatch(r"-?\d+", word):
        return int(word)
    if re.fullmatch(r"-?\d+\.\d+", word):
        return float(word)
    if re.fullmatch(r"[a-z]+", word):  # a bare word (priority's medium)
        return word
    return NONE  # "current directory", "from env", "from config": not a literal


# -- Forgekeeper (002): `- `name` (type, required|optional, max N chars, default: X) - what` ----
_FK_ARG = re.compile(r"^- `(\w+)` \(([^)]*)\) - (.*)$", re.M)


def _forgekeeper() -> dict[str, SeedTool]:
    doc = text("forgekeeper").split("## Adding Custom Tools")[0]
    out = {}
    for name, body in _sections(doc, "####"):
        tool = SeedTool("forgekeeper", name, notes=body)
        args = body.split("**Arguments:**", 1)[1].split("**Returns:**", 1)[0]
        for m in _FK_ARG.finditer(args):
            p = Param(m.group(1), words=m.group(0))
            for part in (x.strip() for x in m.group(2).split(",")):
                if part in ("string", "integer", "boolean", "array", "object", "number"):
                    p.type = part
                elif part in ("required", "optional"):
                    p.required = part == "required"
                elif mm := re.fullmatch(r"max (\d+) (chars|items)", part):
                    p.max_length = int(mm.group(1))
                elif mm := re.fullmatch(r"max (\d+) bytes", part):
                    p.max_bytes = int(mm.group(1))
                elif mm := re.fullmatch(r"min: (\d+)", part):
                    p.minimum = int(mm.group(1))
                elif mm := re.fullmatch(r"enum: ([\w/]+)", part):
                    p.enum = mm.group(1).split("/")
                elif part.startswith("default"):
                    p.default = _literal(part.removeprefix("default").lstrip(": "))
            if p.name.endswith("_ms"):
                p.unit = "ms"
            tool.params[p.name] = p
        returns = _after(body, "Returns")
        if returns is not None:
            tool.returns = _json(returns)
        example = _after(body, "Example")
        if example is not None:
            call = _json(example)
            assert call["tool"] == name, f"forgekeeper {name}: its example calls {call['tool']}"
            response = _after(body, "Response")
            tool.examples.append(Example(call["arguments"], _json(response) if response is not None else NONE))
        errors = body.split("**Common Errors:**", 1)[1].split("**", 1)[0] if "**Common Errors:**" in body else ""
        tool.errors = re.findall(r"^- `([^`]+)` - ", errors, flags=re.M)
        out[name] = tool
    listed = re.findall(r"`(\w+)`", re.search(r"\| \*\*Utility\*\*.*?\n\n", doc, re.S).group(0))
    assert sorted(listed) == sorted(out), f"forgekeeper: the tool table names {listed}, the sections {list(out)}"
    assert len(out) == 19
    return out


# -- the Go agent SDK (003): a parameters table per tool, an "Example LLM call" ------------------
_GO_TYPES = {"string": "string", "number": "number", "boolean": "boolean"}


def _go_agent() -> dict[str, SeedTool]:
    doc = text("go-agent").split("## Output Truncation")[0]
    out = {}
    for heading, body in _sections(doc, "###"):
        m = re.fullmatch(r"`(\w+)`", heading)
        if not m:
            continue
        tool = SeedTool("go-agent", m.group(1), notes=body)
        for row in re.findall(r"^\| `(\w+)` \| (\w+) \| (✓?) *\| (.*) \|$", body, flags=re.M):
            name, typ, req, what = row
            p = Param(name, _GO_TYPES[typ], req == "✓", words="| " + " | ".join(row) + " |")
            if d := re.search(r"[Dd]efault: `?([\w.\"]+)`?", what):
                p.default = _literal(d.group(1))
            if mx := re.search(r"max: (\d+)", what):
                p.maximum = int(mx.group(1))
            if "in seconds" in what:
                p.unit = "s"
            tool.params[name] = p
        example = _after(body, "Example LLM call")
        assert example is not None, f"go-agent {tool.name}: no example"
        tool.examples.append(Example(json.loads(example)))
        if "**Errors:**" in body:
            tool.errors = re.findall(r"^- (.+)$", body.split("**Errors:**", 1)[1].split("**", 1)[0], flags=re.M)
        out[tool.name] = tool
    listed = set(re.findall(r"`(\w+)`", re.search(r"\| `coding` \|.*?\| `none` \|", doc, re.S).group(0)))
    listed -= {"coding", "readonly", "web", "all", "none"}
    assert listed == set(out), f"go-agent: presets name {sorted(listed)}, the reference {sorted(out)}"
    return out


# -- miclaw (004): a Go struct per tool, with json tags and comments ----------------------------
_GO_FIELD = re.compile(r"^\s+(\w+)\s+([\w\[\]]+)\s+`json:\"([\w]+)(,omitempty)?\"`\s*(?://\s*(.*))?$", re.M)
_MC_TYPES = {"string": "string", "int": "integer", "bool": "boolean", "float64": "number",
             "map[string]string": "object"}


def _miclaw() -> dict[str, SeedTool]:
    doc = text("miclaw")
    inventory = re.findall(r"^\| `(\w+)` \| \w+ \|", doc, flags=re.M)
    out = {}
    for name, body in _sections(doc, "###"):
        if name not in inventory:
            continue
        tool = SeedTool("miclaw", name, notes=body)
        for block in _blocks(body, "go"):
            for f in _GO_FIELD.finditer(block):
                _, typ, key, omitempty, comment = f.groups()
                comment = comment or ""
                p = Param(key, _MC_TYPES[typ], "required" in comment or not omitempty, words=f.group(0).strip())
                if d := re.search(r"default: ([\d.]+)", comment):
                    p.default = _literal(d.group(1))
                if re.search(r"\bseconds\b", comment):
                    p.unit = "s"
                if e := re.findall(r'"(\w+)"', comment) if key == "action" else None:
                    p.enum = e
                tool.params[key] = p
        # defaults and bounds stated as bullets: "- Default timeout: 1800 seconds (30 min)"
        for kind, key, value in re.findall(r"^- (Default|Minimum) (\w+): (\d+)", body, flags=re.M):
            if key in tool.params:
                if kind == "Default":
                    tool.params[key].default = int(value)
                else:
                    tool.params[key].minimum = int(value)
        out[name] = tool
    assert sorted(out) == sorted(inventory), f"miclaw: inventory {inventory}, sections {list(out)}"
    return out


# -- ah (000): `parameters:` lists under each built-in tool --------------------------------------
def _ah() -> dict[str, SeedTool]:
    doc = text("ah").split("## custom tools")[0]
    out = {}
    for name, body in _sections(doc, "###"):
        tool = SeedTool("ah", name, notes=body)
        for pname, req, what in re.findall(r"^- `(\w+)` \((required|optional)\): (.*)$", body, flags=re.M):
            p = Param(pname, required=req == "required", words=what)
            if "milliseconds" in what:
                p.unit = "ms"
            tool.params[pname] = p
        if d := re.search(r"\(default (\d+)s\)", body):  # bash: "configurable timeout (default 120s)"
            tool.params["timeout"].default = int(d.group(1)) * 1000  # in the argument's unit, ms
        out[name] = tool
    assert sorted(out) == ["bash", "edit", "read", "write"], sorted(out)
    return out


def ah_truncation() -> dict[str, tuple[int, int | None]]:
    """ah's default limits table: {tool: (characters, lines or None)}."""
    rows = re.findall(r"^\| (\w+) \| ([\d,]+) \| ([\d,]+|—) \|$", text("ah"), flags=re.M)
    return {t: (int(c.replace(",", "")), None if lines == "—" else int(lines.replace(",", ""))) for t, c, lines in rows}


# -- acai (001): the example tool, its describe answer ------------------------------------------
def acai_example_tool() -> tuple[str, str]:
    """(file name, source) of the complete example dynamic tool the document gives."""
    m = re.search(r"Here's a complete example from `\.acai/tools/([\w.-]+)`:\s*```javascript\n(.*?)```",
                  text("acai"), flags=re.S)
    assert m, "acai: the complete example tool is not found"
    return m.group(1), m.group(2)


def acai_described() -> SeedTool:
    """The example tool's describe answer, as its source states it, in acai's registered name."""
    _, source = acai_example_tool()
    described = re.search(r"JSON\.stringify\((\{.*?\}), null, 2\)", source, flags=re.S).group(1)
    # the object literal is JavaScript: quote its keys and strings to read it as JSON
    js = re.sub(r"(\w+):", r'"\1":', described)
    js = re.sub(r"'([^']*)'", lambda m: json.dumps(m.group(1)), js)
    js = re.sub(r",(\s*[}\]])", r"\1", js)
    obj = json.loads(js)
    prefix = re.search(r"A tool named `([\w-]+)` becomes `([\w-]+)`", text("acai"))
    shown = prefix.group(2).replace(prefix.group(1), obj["name"])
    tool = SeedTool("acai", shown)
    for p in obj["parameters"]:
        tool.params[p["name"]] = Param(p["name"], p["type"], p.get("required", True), p.get("default", NONE))
    return tool


@cache
def parse(dialect: str) -> dict[str, SeedTool]:
    """{tool name: SeedTool} of the dialect's seed document."""
    if dialect == "acai":
        t = acai_described()
        return {t.name: t}
    return {"forgekeeper": _forgekeeper, "go-agent": _go_agent, "miclaw": _miclaw, "ah": _ah}[dialect]()
