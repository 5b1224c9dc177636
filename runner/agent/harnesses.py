"""Small programs that load one custom tool of a language runtime and describe or run it, each
in its own process in the sandbox (so a hang is killed at the deadline and a crash loses one
call): Forgekeeper ES modules through node, Lua tool records through lupa, Python entry points.

Each takes `MODE TARGET` (MODE: describe | run). describe prints the tool's JSON
{name?, description, guidance, parameters}; run reads the arguments (a JSON object) on stdin.
The Lua and Python ones answer run with JSON {"text", "is_error"} on stdout, on a copy of the
original fd 1, while fd 1 itself goes to stderr, so a tool's own prints cannot corrupt the
answer; a tool that raises exits 1 with the message on stderr. The node one prints the result
itself (see NODE). The workspace is their working directory, so nothing is imported or
required from it: '' leaves sys.path before any import, ./ leaves Lua's package paths.
"""
from __future__ import annotations

import sys

# Forgekeeper-style ES modules (`export const def` in the OpenAI function format, `export async
# function run(args)`): import one, then describe it or run it with the arguments read from
# stdin. A thrown error exits 1 with the message on stderr.
NODE = r"""
import { pathToFileURL } from 'node:url';
for (const k of ['log', 'info', 'debug']) console[k] = console.error;  // the tool's logging must not corrupt the answer
const [mode, file] = process.argv.slice(-2);
const mod = await import(pathToFileURL(file).href);
const def = mod.def ?? mod.default?.def;
const run = mod.run ?? mod.default?.run;
const fn = def && def.function ? def.function : def;
if (mode === 'describe') {
  if (!fn || typeof fn.name !== 'string') { console.error('the module exports no def with a name'); process.exit(2); }
  if (typeof run !== 'function') { console.error('the module exports no run function'); process.exit(2); }
  process.stdout.write(JSON.stringify({ name: fn.name, description: fn.description || '',
    guidance: fn.guidance || '', parameters: fn.parameters || { type: 'object', properties: {} } }));
} else {
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  try {
    const out = await run(JSON.parse(input || '{}'));
    process.stdout.write(typeof out === 'string' ? out : JSON.stringify(out ?? null));
  } catch (e) {
    process.stderr.write(String((e && e.message) || e));
    process.exit(1);
  }
}
"""

# ah's Lua tool records: a file returning {name, description, system_prompt, input_schema,
# execute = function(input) return result, is_error end} (and optionally needs_approval = true). Lua 5.4 when lupa has it (what ah
# targets), without lupa's `python` bridge; `require` finds modules beside the tool.
LUA = r"""
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]  # before any import: the workspace (cwd) shadows nothing
import json, os
ANSWER = os.fdopen(os.dup(1), "w", buffering=1)  # the answer's own channel: what the tool prints goes to stderr
os.dup2(2, 1)
mode, path = sys.argv[1], sys.argv[2]
try:
    import lupa
except ImportError:
    sys.stderr.write("Lua tool records need the Python package lupa in the sandbox: runner/base has it; "
                     "with executor local install runner[lua]")
    sys.exit(3)
mod = getattr(lupa, "lua54", lupa)
lua = mod.LuaRuntime(encoding=None, unpack_returned_tuples=True, register_eval=False, register_builtins=False)
def text(b):
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b
def to_py(v, depth=0):
    if depth > 64:
        raise ValueError("a table nested over 64 deep (a cycle?)")
    kind = mod.lua_type(v)
    if kind == "table":
        keys = list(v.keys())
        if keys and all(isinstance(k, int) for k in keys) and sorted(keys) == list(range(1, len(keys) + 1)):
            return [to_py(v[k], depth + 1) for k in range(1, len(keys) + 1)]
        return {str(text(k)): to_py(v[k], depth + 1) for k in keys}
    if kind is not None:
        return "<lua %s>" % kind
    return text(v)
def to_lua(v):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, list):
        return [to_lua(x) for x in v]
    if isinstance(v, dict):
        return {to_lua(k): to_lua(x) for k, x in v.items()}
    return v
g = lua.globals()
def no_cwd(paths):  # the default search paths start with ./?.lua: the workspace must not provide modules
    return b";".join(p for p in paths.split(b";") if p and not p.startswith(b"./"))
g.package.path = os.path.dirname(os.path.abspath(path)).encode() + b"/?.lua;" + no_cwd(g.package.path)
g.package.cpath = no_cwd(g.package.cpath)
loaded = g.loadfile(path.encode())
if isinstance(loaded, tuple):
    sys.stderr.write("cannot load: " + str(text(loaded[1])))
    sys.exit(2)
try:
    rec = loaded()
    if isinstance(rec, tuple):
        rec = rec[0] if rec else None
    if mod.lua_type(rec) != "table":
        sys.stderr.write("the file returns no tool record (a table with name, description, input_schema, execute)")
        sys.exit(2)
    if mode == "describe":
        if mod.lua_type(rec[b"execute"]) != "function":
            sys.stderr.write("the tool record has no execute function")
            sys.exit(2)
        schema = to_py(rec[b"input_schema"]) if rec[b"input_schema"] is not None else {}
        if schema == []:
            schema = {}
        if not isinstance(schema, dict):
            sys.stderr.write("input_schema must be a table (a JSON Schema object)")
            sys.exit(2)
        if schema.get("properties") == []:
            schema["properties"] = {}
        if schema.get("required") == {}:
            schema["required"] = []
        out = {"description": to_py(rec[b"description"]) or "", "guidance": to_py(rec[b"system_prompt"]) or "",
               "parameters": schema, "needs_approval": bool(rec[b"needs_approval"])}
        if rec[b"name"] is not None:
            out["name"] = to_py(rec[b"name"])
        ANSWER.write(json.dumps(out) + "\n")
    else:
        params = json.loads(sys.stdin.read() or "{}")
        res = rec[b"execute"](lua.table_from(to_lua(params), recursive=True))
        result, is_error = (res[0] if res else None, bool(res[1]) if len(res) > 1 else False) \
            if isinstance(res, tuple) else (res, False)
        result = to_py(result)
        if result is None:
            result = ""
        if not isinstance(result, str):
            result = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
        ANSWER.write(json.dumps({"text": result, "is_error": is_error}) + "\n")
except mod.LuaError as e:
    sys.stderr.write("Lua error: " + str(text(e.args[0]) if e.args else e))
    sys.exit(1)
"""

# A function or class registered in the `runner.tools` entry-point group, as "module:attr". A
# class is instantiated without arguments and its `run` (else `__call__`) is the tool. The
# schema is the object's `parameters` (or `input_schema`) if it has one, else it is read from
# the signature; the description is `description`, else the docstring's first paragraph.
PYTHON = r"""
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]  # before any import: the workspace (cwd) shadows nothing
import asyncio, importlib, inspect, json, os, typing
ANSWER = os.fdopen(os.dup(1), "w", buffering=1)  # the answer's own channel: what the tool prints goes to stderr
os.dup2(2, 1)
mode, ref = sys.argv[1], sys.argv[2]
mod_name, _, attr = ref.partition(":")
obj = importlib.import_module(mod_name)
for part in attr.split(".") if attr else []:
    obj = getattr(obj, part)
if inspect.isclass(obj):
    obj = obj()
fn = obj if inspect.isroutine(obj) else getattr(obj, "run", None) or obj
if not callable(fn):
    sys.stderr.write("%s is neither a function nor an object with a run method" % ref)
    sys.exit(2)
TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
         tuple: "array"}
def schema_of(f):
    props, required = {}, []
    try:
        hints = typing.get_type_hints(f)
    except Exception:
        hints = {}
    names = {t.__name__: t for t in TYPES}
    for p in inspect.signature(f).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = hints.get(p.name, p.annotation)
        if isinstance(ann, str):
            ann = names.get(ann.split("[")[0].strip(), ann)
        ann = typing.get_origin(ann) or ann
        if ann is typing.Union:
            args = [a for a in typing.get_args(p.annotation) if a is not type(None)]
            ann = typing.get_origin(args[0]) or args[0] if args else None
        prop = {"type": TYPES[ann]} if ann in TYPES else {}
        if p.default is p.empty:
            required.append(p.name)
        else:
            try:
                json.dumps(p.default)
                if p.default is not None:
                    prop["default"] = p.default
            except (TypeError, ValueError):
                pass
        props[p.name] = prop
    out = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out
if mode == "describe":
    doc = inspect.getdoc(obj) or ""
    first, _, rest = doc.strip().partition("\n\n")
    schema = getattr(obj, "parameters", None) or getattr(obj, "input_schema", None)
    if not isinstance(schema, dict):
        schema = schema_of(fn)
    out = {"description": str(getattr(obj, "description", None) or " ".join(first.split())),
           "guidance": str(getattr(obj, "guidance", None) or rest.strip()), "parameters": schema,
           "needs_approval": bool(getattr(obj, "needs_approval", False))}
    ANSWER.write(json.dumps(out) + "\n")
else:
    params = json.loads(sys.stdin.read() or "{}")
    try:
        res = fn(**params)
        if inspect.isawaitable(res):
            async def _wait(aw):
                return await aw
            res = asyncio.run(_wait(res))
    except Exception as e:
        sys.stderr.write("%s: %s" % (type(e).__name__, e))
        sys.exit(1)
    if res is None:
        res = ""
    if not isinstance(res, str):
        res = json.dumps(res, separators=(",", ":"), ensure_ascii=False, default=str)
    ANSWER.write(json.dumps({"text": res, "is_error": False}) + "\n")
"""


def node_argv(mode: str, path: str) -> list:
    return ["node", "--input-type=module", "-e", NODE, "--", mode, path]


def lua_argv(mode: str, path: str) -> list:
    return [sys.executable, "-c", LUA, mode, path]


def python_argv(mode: str, ref: str) -> list:
    return [sys.executable, "-c", PYTHON, mode, ref]
