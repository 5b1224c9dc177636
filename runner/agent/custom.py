"""Custom tools inside the sandbox: find them in folders, describe them, run them.

Formats (see TOOLS.md, "Custom tools"):
- `exe`: any executable file; `NAME.md` beside it gives frontmatter `description` and a body of
  usage guidance, else the first line of `NAME --help`. One string argument `args`, split with
  shlex into argv (no shell ever runs it).
- `script`: a file that mentions TOOL_ACTION; `TOOL_ACTION=describe` prints JSON (or the
  plain-text form below), `TOOL_ACTION=execute` reads `[{"name", "value"}]` on stdin.
  Interpreter from the shebang, else from the extension.
- `plugin`: a long-lived JSON-lines process listed in the policy (plugins.py).
- `module`: a Forgekeeper `.mjs` exporting `def` and `run`, through node (harnesses.NODE).
- `lua`: an ah Lua tool record, through lupa (harnesses.LUA).
- `python`: a function or class of the `runner.tools` entry-point group; the controller finds
  the entry points (metadata only) and gives `module:attr` and the folders to import from.

The plain-text describe form (one `key: value` per line, then a parameter list):

    name: greet
    description: Greets someone
    needsApproval: false
    parameters:
    - who (string, required): who to greet
    - times (number, optional, default 1): how many times

Two ops for the controller: `custom_describe` (scan folders, describe every tool, answer the
tools and a reason for each one skipped) and `custom_run` (run one tool). Both are stateless
apart from the plugin processes, so they work in per-call sandboxes too.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import subprocess
import threading

from . import harnesses, plugins, procs
from .context import Ctx, ToolError

DESCRIBE_CAP = 1024 * 1024
RUN_CAP = 16 * 1024 * 1024
# One tool's answer to describe, and all of them: the answer is one line of the channel (64 MiB
# at most, wire.MAX_LINE), which a few tools of the workspace filled, and every custom tool was
# lost with it. Description and guidance are cut at these here, and again by the controller
# (runner/tools/custom.py), which takes the same figures and trusts no answer.
DESCRIPTION_MAX = 2000
GUIDANCE_MAX = 16000
PARAMETERS_MAX = 64 * 1024  # a tool's parameters schema, as JSON
ANSWER_MAX = 48 * 1024 * 1024  # the tools described; past it a tool is skipped, the project's first
HEAD = 64 * 1024
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
TYPES = {"string", "number", "integer", "boolean", "array", "object"}
EXT_INTERP = {".js": ["node"], ".mjs": ["node"], ".cjs": ["node"], ".py": ["python3"], ".sh": ["bash"],
              ".bash": ["bash"], ".rb": ["ruby"]}
HINTS = {"node": "; the JS tools need node in the sandbox: with docker use the image runner/node:latest "
                 "(policy sandbox.image, built by `runner images build node`)"}
ARGS_SCHEMA = {"type": "object", "properties": {"args": {
    "type": "string", "default": "",
    "description": "the command-line arguments, split like a shell would split them (no shell runs them)"}}}


def interpreter_hint(argv: list) -> str:
    """How to get the interpreter that runs argv (`node`, `/usr/bin/env node`), if runner knows."""
    names = [os.path.basename(a) for a in argv[:3] if not a.startswith("-")]
    return next((HINTS[n] for n in names if n in HINTS), "")


class DescribeError(Exception):
    """Why one tool could not be loaded."""


# -- running a process with a deadline ------------------------------------------------------------
def run_captured(argv: list, cwd: str, env: dict, timeout: float, stdin: bytes | None = None,
                 cap: int = RUN_CAP, merge: bool = False):
    """(exit code, stdout, stderr, timed_out, dropped bytes). The process gets its own group,
    which is killed (TERM, then KILL) at the deadline and swept when the leader has exited."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE)
    except FileNotFoundError as e:
        raise ToolError(f"cannot run {argv[0]}: not found ({e.strerror}){interpreter_hint(argv)}") from None
    except PermissionError as e:
        raise ToolError(f"cannot run {argv[0]}: permission denied ({e.strerror})") from None
    bufs = {"out": bytearray(), "err": bytearray()}
    dropped = [0]

    def drain(pipe, buf) -> None:
        while True:
            try:
                data = os.read(pipe.fileno(), 65536)
            except OSError:
                data = b""
            if not data:
                return
            room = cap - len(buf)
            if room > 0:
                buf += data[:room]
            dropped[0] += max(0, len(data) - max(room, 0))

    readers = [threading.Thread(target=drain, args=(proc.stdout, bufs["out"]), daemon=True)]
    if not merge:
        readers.append(threading.Thread(target=drain, args=(proc.stderr, bufs["err"]), daemon=True))
    for t in readers:
        t.start()
    if stdin is not None:
        procs.feed_stdin(proc, stdin)
    rc = procs._wait(proc, timeout)
    timed_out = rc is None
    if timed_out:
        procs.kill_group(proc.pid, signal.SIGTERM)
        rc = procs._wait(proc, procs.KILL_GRACE)
        if rc is None:
            procs.kill_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    for t in readers:
        t.join(0.5)
    procs.kill_group(proc.pid, signal.SIGKILL)  # what the tool left behind holds our pipes
    for t in readers:
        t.join(2)
    for p in (proc.stdout, proc.stderr):
        if p is not None:
            p.close()
    return (124 if timed_out else procs.code_of(rc)), bytes(bufs["out"]), bytes(bufs["err"]), timed_out, dropped[0]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# -- finding and classifying files ---------------------------------------------------------------
def _head(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD)


def classify(path: str) -> str | None:
    """The format of a file in a tools folder, or None when it is not a tool. OSError when it
    is a file that cannot be read, or a link to nothing here: its tool would vanish without a
    word."""
    name = os.path.basename(path)
    if name.startswith(".") or name.endswith(".md"):
        return None
    if not os.path.isfile(path):
        if os.path.islink(path) and not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "it is a link to nothing that is here")
        return None
    return classify_head(name, _head(path), os.access(path, os.X_OK))


def classify_head(name: str, head: bytes, executable: bool) -> str | None:
    """classify() from what is already known of a file: its name, its first bytes, its x bit
    (the controller reads these itself, without following links, and calls this)."""
    if name.startswith(".") or name.endswith(".md"):
        return None
    if b"TOOL_ACTION" in head:
        return "script"
    if name.endswith(".lua"):
        return "lua"
    if name.endswith(".mjs") and b"export" in head:
        return "module"
    if executable:
        return "exe"
    return None


def interpreter(path: str) -> list:
    """The argv prefix that runs a script: its shebang, else what its extension says."""
    head = _head(path).split(b"\n", 1)[0]
    if head.startswith(b"#!"):
        try:
            argv = shlex.split(head[2:].decode("utf-8").strip())
        except ValueError:
            argv = []
        if argv:
            return argv
    ext = os.path.splitext(path)[1].lower()
    if ext in EXT_INTERP:
        return list(EXT_INTERP[ext])
    if os.access(path, os.X_OK):
        return []
    raise DescribeError("no shebang line, not executable, and no known extension (.js .mjs .cjs .py .sh .bash .rb)")


# -- describing --------------------------------------------------------------------------------
def frontmatter(text: str):
    """(fields, body) of a markdown file with optional `---` YAML-ish frontmatter (key: value)."""
    fields: dict = {}
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                for line in lines[1:i]:
                    if ":" in line and not line.startswith((" ", "\t")):
                        k, v = line.split(":", 1)
                        fields[k.strip()] = v.strip().strip("\"'")
                return fields, "\n".join(lines[i + 1:]).strip()
    return fields, text.strip()


def _describe_exe(ctx: Ctx, path: str, timeout: float) -> dict:
    stem = os.path.basename(path)
    base = os.path.splitext(stem)[0] or stem
    desc, guidance = "", ""
    for md in (path + ".md", os.path.join(os.path.dirname(path), base + ".md")):
        if os.path.isfile(md):
            with open(md, encoding="utf-8", errors="replace") as f:
                fields, guidance = frontmatter(f.read(DESCRIBE_CAP))  # as much as a describe may print
            desc = fields.get("description", "")
            if not desc:
                raise DescribeError(f"{os.path.basename(md)} has no description in its frontmatter")
            break
    else:
        code, out, err, timed_out, _ = run_captured([path, "--help"], ctx.workspace, ctx.env, timeout,
                                                    cap=DESCRIBE_CAP)
        if timed_out:
            raise DescribeError(f"`{stem} --help` did not finish within {timeout:g}s (killed)")
        if code != 0:
            raise DescribeError(f"`{stem} --help` exited with code {code}: {_text(err or out).strip()[:300]}")
        first = next((ln.strip() for ln in _text(out or err).splitlines() if ln.strip()), "")
        if not first:
            raise DescribeError(f"`{stem} --help` printed nothing; add {base}.md with a description")
        desc = first
    return {"name": base, "description": desc, "guidance": guidance, "parameters": ARGS_SCHEMA,
            "needs_approval": False}


def _param_schema(params) -> dict:
    """acai's parameter list -> JSON Schema."""
    if not isinstance(params, list):
        raise DescribeError("parameters must be a list of {name, type, description, required, default}")
    props, required = {}, []
    for p in params:
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not PARAM.match(p["name"]):
            raise DescribeError(f"bad parameter {p!r}: each needs a name of letters, digits, _ and -")
        t = p.get("type", "string")
        if t not in TYPES:
            raise DescribeError(f"parameter {p['name']}: unknown type {t!r} (use string, number, boolean ...)")
        prop = {"type": t}
        if p.get("description"):
            prop["description"] = str(p["description"])
        if "default" in p and p["default"] is not None:
            prop["default"] = p["default"]
        props[p["name"]] = prop
        if p.get("required", True) and "default" not in prop:
            required.append(p["name"])
    schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


_TEXT_PARAM = re.compile(r"^[-*]\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(?:\(([^)]*)\))?\s*:?\s*(.*)$")


def parse_text_schema(text: str) -> dict:
    """The plain-text describe form (see the module docstring) -> the JSON form."""
    meta: dict = {}
    params: list = []
    in_params = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if in_params and line[0] in "-*":
            m = _TEXT_PARAM.match(line)
            if not m:
                raise DescribeError(f"cannot read the parameter line {line!r}")
            p = {"name": m.group(1), "type": "string", "required": True, "description": m.group(3).strip()}
            for word in (w.strip() for w in (m.group(2) or "").split(",") if w.strip()):
                low = word.lower()
                if low in TYPES:
                    p["type"] = low
                elif low == "optional":
                    p["required"] = False
                elif low == "required":
                    p["required"] = True
                elif low.startswith("default"):
                    val = word[7:].lstrip(" =:")
                    try:
                        p["default"] = json.loads(val)
                    except ValueError:
                        p["default"] = val
            params.append(p)
            continue
        if ":" not in line:
            raise DescribeError(f"cannot read the line {line!r} (expected key: value)")
        k, v = (s.strip() for s in line.split(":", 1))
        if k.lower() in ("parameters", "params"):
            in_params = True
            continue
        meta[k] = v
    if not meta.get("name"):
        raise DescribeError("the text description has no name: line")
    out = {"name": meta["name"], "description": meta.get("description", ""), "parameters": params}
    na = meta.get("needsApproval", meta.get("needs_approval"))
    if na is not None:
        out["needsApproval"] = na.lower() not in ("false", "no", "0")
    return out


def _describe_script(ctx: Ctx, path: str, timeout: float) -> dict:
    argv = interpreter(path) + [path]
    env = dict(ctx.env, TOOL_ACTION="describe")
    code, out, err, timed_out, _ = run_captured(argv, ctx.workspace, env, timeout, cap=DESCRIBE_CAP)
    if timed_out:
        raise DescribeError(f"describe did not finish within {timeout:g}s (killed)")
    if code != 0:
        hint = interpreter_hint(argv) if code == 127 else ""  # `/usr/bin/env node` found no node
        raise DescribeError(f"describe exited with code {code}: {_text(err or out).strip()[:300]}{hint}")
    text = _text(out).strip()
    if not text:
        raise DescribeError("describe printed nothing on stdout")
    if text.startswith("{"):
        try:
            meta = json.loads(text)
        except ValueError as e:
            raise DescribeError(f"describe printed invalid JSON ({e}): {text[:120]!r}") from None
    else:
        try:
            meta = parse_text_schema(text)
        except DescribeError as e:
            raise DescribeError(f"describe printed neither JSON nor the text form: {e}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not NAME.match(meta["name"]):
        raise DescribeError(f"describe gave no valid name (letters, digits, _ and -): {str(meta)[:120]!r}")
    if not isinstance(meta.get("description"), str) or not meta["description"].strip():
        raise DescribeError("describe gave no description")
    return {"name": meta["name"], "description": meta["description"].strip(),
            "guidance": str(meta.get("guidance") or meta.get("system_prompt") or ""),
            "parameters": _param_schema(meta.get("parameters", [])),
            "needs_approval": bool(meta.get("needsApproval", True))}


HARNESS = {"module": ("the node harness", harnesses.node_argv), "lua": ("the Lua harness", harnesses.lua_argv),
           "python": ("the Python harness", harnesses.python_argv)}


def _env(ctx: Ctx, pythonpath) -> dict:
    if not pythonpath:
        return ctx.env
    return dict(ctx.env, PYTHONPATH=":".join(pythonpath), PYTHONDONTWRITEBYTECODE="1")


def _describe_harness(ctx: Ctx, kind: str, path: str, timeout: float, pythonpath=(), name=None) -> dict:
    """Describe a tool of a language runtime (module, lua, python) through its harness."""
    what, argv = HARNESS[kind]
    code, out, err, timed_out, _ = run_captured(argv("describe", path), ctx.workspace, _env(ctx, pythonpath),
                                                timeout, cap=DESCRIBE_CAP)
    if timed_out:
        raise DescribeError(f"describing did not finish within {timeout:g}s (killed)")
    if code != 0:
        raise DescribeError(f"{what} exited with code {code}: {_text(err or out).strip()[-300:]}")
    try:
        meta = json.loads(_text(out))
    except ValueError as e:
        raise DescribeError(f"{what} printed invalid JSON ({e})") from None
    if not isinstance(meta.get("parameters"), dict):
        raise DescribeError("the parameters must be a JSON Schema object")
    name = name or meta.get("name")
    if kind == "lua" and not name:
        name = os.path.splitext(os.path.basename(path))[0]
    if not isinstance(name, str):
        raise DescribeError(f"no tool name: {str(name)[:80]!r}")
    if kind != "module" and not str(meta.get("description") or "").strip():
        raise DescribeError("the tool has no description" + (" (add a docstring)" if kind == "python" else ""))
    return {"name": name, "description": str(meta.get("description") or "").strip(),
            "guidance": str(meta.get("guidance") or ""), "parameters": meta["parameters"],
            "needs_approval": bool(meta.get("needs_approval"))}


def _describe_one(ctx: Ctx, kind: str, path: str, timeout: float) -> list:
    if kind == "exe":
        return [_describe_exe(ctx, path, timeout)]
    if kind in HARNESS:
        return [_describe_harness(ctx, kind, path, timeout)]
    return [_describe_script(ctx, path, timeout)]


def describe(ctx: Ctx, args: dict) -> dict:
    """Scan `places` ([{place, dir}] in precedence order) and start `plugins` ([{path, args,
    place}]); answer {tools: [...], errors: [{place, path, error}]}. Every tool is described in
    its own process with `timeout` seconds; one failing never stops the others."""
    timeout = float(args.get("timeout") or 10)
    jobs, errors = [], []
    for order, place in enumerate(args.get("places") or []):
        d = place["dir"]
        try:
            names = sorted(os.listdir(d))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:  # there but unreadable: its tools would vanish without a word
            errors.append({"place": place["place"], "path": d, "kind": "-",
                           "error": f"this tool folder could not be listed: {e.strerror or e}"})
            continue
        for n in names:
            path = os.path.join(d, n)
            try:
                kind = classify(path)
            except OSError as e:
                errors.append({"place": place["place"], "path": path, "kind": "-",
                               "error": f"this tool could not be read: {e.strerror or e}"})
                continue
            if kind:
                jobs.append((order, place["place"], kind, path, None))
    for ep in args.get("python") or []:  # ordered by the controller, like the places
        jobs.append((ep.get("order", 0), ep.get("place", "python"), "python", ep["ref"],
                     {"name": ep["name"], "pythonpath": list(ep.get("pythonpath") or [])}))
    base = len(args.get("places") or [])
    for i, pl in enumerate(args.get("plugins") or []):
        jobs.append((base + i, pl.get("place", "policy"), "plugin", pl["path"], list(pl.get("args") or [])))

    def work(job):
        order, place, kind, path, extra = job
        pargs = extra if kind == "plugin" else None
        try:
            if kind == "plugin":
                found = plugins.describe(ctx, path, pargs, timeout)
            elif kind == "python":
                found = [dict(_describe_harness(ctx, kind, path, timeout, extra["pythonpath"], extra["name"]),
                              pythonpath=extra["pythonpath"])]
            else:
                found = _describe_one(ctx, kind, path, timeout)
        except (DescribeError, ToolError, OSError) as e:
            return [], [{"place": place, "path": path, "kind": kind, "error": str(e)}]
        except Exception as e:  # a bug here must not lose the other tools
            return [], [{"place": place, "path": path, "kind": kind, "error": f"{type(e).__name__}: {e}"}]
        kept, errs = [], []
        for t in found:
            t.update(place=place, order=order, kind=kind, path=path)
            if pargs is not None:
                t["plugin_args"] = pargs
            t["description"] = t["description"][:DESCRIPTION_MAX]
            t["guidance"] = t["guidance"][:GUIDANCE_MAX]
            try:
                size = len(json.dumps(t["parameters"]))
            except (TypeError, ValueError, RecursionError):
                size = PARAMETERS_MAX + 1
            if size > PARAMETERS_MAX:
                errs.append({"place": place, "path": path, "kind": kind, "error": f"the parameters schema of "
                             f"{str(t['name'])[:80]} is {size} bytes of JSON, over {PARAMETERS_MAX}: describe fewer or "
                             "shorter"})
                continue
            kept.append(t)
        return kept, errs

    tools, skipped, lost, size = [], [], 0, len(json.dumps(errors))

    def room(entry: dict) -> bool:  # whether the answer still holds it (then it does)
        nonlocal size
        n = len(json.dumps(entry))
        if size + n > ANSWER_MAX:
            return False
        size += n
        return True

    done = _on_threads(work, jobs, 8)
    for i in sorted(range(len(jobs)), key=lambda i: jobs[i][1] == "project"):  # the operator's places first
        found, errs = done[i]
        for e in errs:
            if room(e):
                errors.append(e)
            else:
                lost += 1
        for t in found:
            (tools if room(t) else skipped).append(t)
    why = f"skipped: the tools described before it fill the answer ({ANSWER_MAX} bytes)"
    errors += [{"place": t["place"], "path": t["path"], "kind": t["kind"], "error": why} for t in skipped[:100]]
    if len(skipped) > 100 or lost:
        errors.append({"place": "-", "path": "-", "kind": "-", "error": f"{max(len(skipped) - 100, 0)} more tools "
                       f"and the reasons {lost} more were skipped are left out: the answer is full ({ANSWER_MAX} bytes)"})
    return {"content": {"tools": tools, "errors": errors}, "meta": {}}


def _on_threads(fn, jobs: list, most: int) -> list:
    """[fn(job) for job in jobs], on at most `most` threads. Not concurrent.futures: its first
    import (and that of logging, which it imports) registers fork hooks that take a lock before
    a fork and release it after; imported while the zygote's thread forks (preexec_fn runs the
    hooks), the release came without the take and freed the lock a describe held ("release
    unlocked lock": every custom tool of the session lost, once in a few CI runs)."""
    results: list = [None] * len(jobs)
    todo = iter(range(len(jobs)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            results[i] = fn(jobs[i])

    threads = [threading.Thread(target=worker, name="runner-agent-describe", daemon=True)
               for _ in range(min(most, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# -- running -------------------------------------------------------------------------------------
def _trim_json(text: str) -> str:
    text = text.strip()
    if text[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            pass
    return text


def run(ctx: Ctx, args: dict) -> dict:
    """Run one custom tool: {kind, path, name, args | params, timeout, plugin_args, pythonpath}."""
    kind, path = args["kind"], args["path"]
    timeout = float(args.get("timeout") or 120)
    if kind == "plugin":
        return plugins.call(ctx, path, list(args.get("plugin_args") or []), args["name"], args.get("params") or {},
                            timeout)
    if kind == "exe":
        try:
            argv = [path] + shlex.split(args.get("args") or "")
        except ValueError as e:
            raise ToolError(f"cannot split args into words: {e} (check the quotes)") from None
        code, out, _, timed_out, dropped = run_captured(argv, ctx.workspace, ctx.env, timeout, merge=True)
        text = _text(out)
    elif kind == "script":
        try:
            argv = interpreter(path) + [path]
        except DescribeError as e:
            raise ToolError(str(e)) from None
        params = [{"name": k, "value": v} for k, v in (args.get("params") or {}).items()]
        env = dict(ctx.env, TOOL_ACTION="execute")
        code, out, err, timed_out, dropped = run_captured(argv, ctx.workspace, env, timeout,
                                                          stdin=json.dumps(params).encode() + b"\n")
        text = _trim_json(_text(out)) or _text(err).strip()
    elif kind in HARNESS:  # module, lua, python: the arguments as one JSON object on stdin
        code, out, err, timed_out, dropped = run_captured(HARNESS[kind][1]("run", path), ctx.workspace,
                                                          _env(ctx, args.get("pythonpath")), timeout,
                                                          stdin=json.dumps(args.get("params") or {}).encode())
        if kind == "module":  # the node harness prints the result itself
            text = _trim_json(_text(out)) if code == 0 else _text(err).strip() or _text(out).strip()
        elif code == 0 and not timed_out:  # lua, python: a JSON answer {"text", "is_error"}
            try:
                answer = json.loads(_text(out))
                text = _trim_json(str(answer["text"]))
                tool_error = bool(answer.get("is_error"))
            except (ValueError, KeyError, TypeError):
                tool_error, text = True, f"{HARNESS[kind][0]} answered no result: {_text(out).strip()[:300]!r}"
            if tool_error:  # the tool said so (Lua's is_error): its text, not an exit code
                return {"content": text, "is_error": True, "meta": {"exit_code": 0, "timed_out": False, "kind": kind,
                                                                    "dropped_bytes": dropped}}
        else:
            text = _text(err).strip() or _text(out).strip()
    else:
        raise ToolError(f"unknown custom tool kind {kind!r}")
    meta = {"exit_code": code, "timed_out": timed_out, "kind": kind}
    if kind in HARNESS and code == 1 and not timed_out:  # the tool threw: its message is the error
        return {"content": text or "the tool failed without a message", "is_error": True, "meta": meta}
    if dropped:
        text += f"\n[... {dropped} more bytes of output dropped in the sandbox]"
        meta["dropped_bytes"] = dropped
    if timed_out:
        return {"content": (text + "\n" if text else "") + f"timed out after {timeout:g}s: the tool and all its "
                "processes were killed (exit code 124)", "is_error": True, "meta": meta}
    if code != 0:
        return {"content": (text + "\n" if text else "") + f"exit code: {code}", "is_error": True, "meta": meta}
    return {"content": text, "is_error": False, "meta": meta}
