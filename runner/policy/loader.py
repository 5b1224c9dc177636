"""Load a Policy from YAML: by preset name (`policies/NAME.yaml`) or by file path.

Every problem is reported as `FILE:LINE: dotted.path: message`, found through the YAML node
tree (yaml.compose keeps each node's line), e.g.

    policies/x.yaml:12: limits.memroy: unknown key (did you mean memory?)

A file may start from another with `extends: NAME|PATH` (a path is relative to the file);
mappings merge key by key, lists and scalars are replaced.
"""
from __future__ import annotations

import difflib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .model import Policy
from .problems import PolicyError, Problem, _dotted, from_validation

ENV_POLICY_DIR = "RUNNER_POLICY_DIR"
BUILTIN_DIR = Path(__file__).resolve().parents[2] / "policies"
# The presets of BUILTIN_DIR as parsed (PARSED_FILE: {file name: {sha256 of its text, data}}), so
# that a Runner of a preset imports no YAML parser: PyYAML's import compiles its regular
# expressions, ~25% of a fresh process's Runner() (issue 52). Used only for the very text it was
# made of (the hash); write_parsed() makes it, and tests/unit/policy say it is current.
PARSED_FILE = BUILTIN_DIR / "parsed.json"


# -- where policies live -------------------------------------------------------------------
def policy_dirs(environ: dict[str, str] | None = None) -> list[Path]:
    """Directories searched for presets: RUNNER_POLICY_DIR (colon-separated) first, then the
    repository's policies/."""
    env = os.environ if environ is None else environ
    dirs = [Path(p).expanduser() for p in env.get(ENV_POLICY_DIR, "").split(":") if p.strip()]
    return dirs + [BUILTIN_DIR]


def preset_names(environ: dict[str, str] | None = None) -> list[str]:
    names: set[str] = set()
    for d in policy_dirs(environ):
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def _looks_like_path(s: str) -> bool:
    return "/" in s or os.sep in s or s.endswith((".yaml", ".yml")) or s.startswith(".")


def find_policy(name_or_path: str, environ: dict[str, str] | None = None, relative_to: Path | None = None) -> Path:
    """The file a name or path stands for. A name is looked up among the presets, and only
    there: never as a file of the current directory, which is the workspace by default (a policy
    the agent left there would have chosen the executor, the mounts and the limits). A file is
    given as a path (`./NAME`, `NAME.yaml`)."""
    if _looks_like_path(name_or_path):
        p = Path(name_or_path).expanduser()
        if relative_to is not None and not p.is_absolute():
            p = relative_to / p
        if not p.is_file():
            raise PolicyError(f"policy file {name_or_path} does not exist")
        return p
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name_or_path):
        raise PolicyError(f"bad policy name {name_or_path!r}")
    for d in policy_dirs(environ):
        p = d / f"{name_or_path}.yaml"
        if p.is_file():
            return p
    names = preset_names(environ)
    hint = difflib.get_close_matches(name_or_path, names, n=1)
    raise PolicyError(f"unknown policy {name_or_path!r}" + (f" (did you mean {hint[0]}?)" if hint else "")
                      + f"; presets: {', '.join(names) or '(none)'}; or give a file path")


# -- loading -------------------------------------------------------------------------------
@dataclass
class _Layer:
    file: str
    root: Any  # its yaml.Node (for the lines of problems); None: an empty file, or a preset's parsed data
    data: dict
    parsed: bool = False  # from PARSED_FILE


def load(name_or_path: str, environ: dict[str, str] | None = None) -> Policy:
    """A Policy from a preset name or a YAML file. Raises PolicyError."""
    path = find_policy(name_or_path, environ)
    layers = _read_chain(path, environ, [], parsed=True)
    try:
        return _validate(layers)
    except PolicyError:
        if not any(layer.parsed for layer in layers):
            raise
    return _validate(_read_chain(path, environ, []))  # (a preset the model refuses: said with the YAML's lines)


def _parsed(path: Path, text: str, display: str) -> "_Layer | None":
    """The layer of a preset of BUILTIN_DIR from PARSED_FILE, if that holds this very text's."""
    import hashlib
    import json

    if path.parent != BUILTIN_DIR:
        return None
    try:
        known = json.loads(PARSED_FILE.read_text(encoding="utf-8")).get(path.name)
    except (OSError, ValueError):
        return None
    if not isinstance(known, dict) or known.get("sha256") != hashlib.sha256(text.encode("utf-8")).hexdigest():
        return None
    data = known.get("data")
    return _Layer(display, None, data, parsed=True) if isinstance(data, dict) else None


def parsed_presets() -> dict:
    """What PARSED_FILE should hold: each preset of BUILTIN_DIR parsed as load() parses it."""
    import hashlib

    out = {}
    for f in sorted(BUILTIN_DIR.glob("*.yaml")):
        text = _read_bounded(f)
        out[f.name] = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "data": _parse(text, f.name).data}
    return out


def write_parsed() -> None:
    """Write PARSED_FILE (after a preset changed)."""
    import json

    PARSED_FILE.write_text(json.dumps(parsed_presets(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def load_text(text: str, filename: str = "<policy>", environ: dict[str, str] | None = None) -> Policy:
    """A Policy from YAML text (`extends` paths are relative to the current directory)."""
    layer = _parse(text, filename)
    layers = [layer]
    if layer.data.get("extends"):
        layers += _read_chain(find_policy(str(layer.data["extends"]), environ, Path.cwd()), environ, [])
    return _validate(layers)


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("../..") else str(path)
    except ValueError:
        return str(path)


def _read_chain(path: Path, environ, seen: list[Path], parsed: bool = False) -> list[_Layer]:
    real = path.resolve()
    if real in seen:
        chain = " -> ".join(_display(p) for p in seen + [real])
        raise PolicyError(f"extends makes a loop: {chain}")
    try:
        text = _read_bounded(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PolicyError(f"{_display(path)}: cannot read: {e}") from None
    layer = (parsed and _parsed(path, text, _display(path))) or _parse(text, _display(path))
    layers = [layer]
    base = layer.data.get("extends")
    if base is not None:
        if not isinstance(base, str):
            raise PolicyError([Problem(layer.file, _line_of(layer.root, ("extends",)), "extends",
                                       "must be a preset name or a file path")])
        layers += _read_chain(find_policy(base, environ, path.parent), environ, seen + [real], parsed)
    return layers


MAX_BYTES = 1024 * 1024  # a policy file
MAX_NODES = 100_000  # YAML nodes, aliases expanded (a "billion laughs" file expands to 10**9)
MAX_DEPTH = 64  # mappings and sequences inside one another


def _read_bounded(path: Path) -> str:
    """A policy file's text: a regular file of at most MAX_BYTES (never a FIFO or a device)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    return data.decode("utf-8")


def _check_shape(root, filename: str) -> None:
    """Refuse a YAML tree that would take the rest of the loading down: nested deeper than
    MAX_DEPTH, or more than MAX_NODES nodes once aliases are expanded. Walked without recursion."""
    import yaml

    seen, stack = 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise PolicyError([Problem(filename, None, "", f"more than {MAX_NODES} values once YAML aliases are "
                                       "expanded: write the values out instead of repeating aliases")])
        if d > MAX_DEPTH:
            raise PolicyError([Problem(filename, node.start_mark.line + 1, "",
                                       f"nested more than {MAX_DEPTH} levels deep")])
        if isinstance(node, yaml.MappingNode):
            stack.extend((x, d + 1) for kv in node.value for x in kv)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((x, d + 1) for x in node.value)


def _parse(text: str, filename: str) -> _Layer:
    import yaml

    if len(text) > MAX_BYTES:
        raise PolicyError([Problem(filename, None, "", f"larger than {MAX_BYTES} bytes")])
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_shape(root, filename)
        data = loader.construct_document(root) if root is not None else None
    except RecursionError:
        raise PolicyError([Problem(filename, None, "", f"nested more than {MAX_DEPTH} levels deep")]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(x for x in (e.context, e.problem) if x) or "invalid YAML"
        raise PolicyError([Problem(filename, mark.line + 1 if mark else None, "", f"invalid YAML: {msg}")]) from None
    except yaml.YAMLError as e:
        raise PolicyError([Problem(filename, None, "", f"invalid YAML: {e}")]) from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError([Problem(filename, root.start_mark.line + 1, "",
                                   f"a policy is a mapping of settings, not a {type(data).__name__}")])
    dups = _duplicates(root, filename, ())
    if dups:
        raise PolicyError(dups)
    return _Layer(filename, root, data)


def _duplicates(node, filename: str, path: tuple) -> list[Problem]:
    import yaml

    out: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if key is not None and key != "<<":
                if key in first:
                    out.append(Problem(filename, k.start_mark.line + 1, _dotted(path + (key,)),
                                       f"duplicate key (first set on line {first[key]})"))
                else:
                    first[key] = k.start_mark.line + 1
            out += _duplicates(v, filename, path + ((key if key is not None else "?"),))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += _duplicates(v, filename, path + (i,))
    return out


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over


def _validate(layers: list[_Layer]) -> Policy:
    data: dict = {}
    for layer in reversed(layers):
        data = _merge(data, layer.data)
    if "name" not in data:
        data["name"] = Path(layers[0].file).stem if layers[0].file.endswith((".yaml", ".yml")) else "custom"
    if len(layers) > 1:
        data["extends"] = layers[0].data.get("extends")
    try:
        policy = Policy.model_validate(data)
    except ValidationError as e:
        problems = from_validation(e, Policy, lambda loc, want_key: _locate(layers, loc, want_key))
        problems.sort(key=lambda p: (p.file != layers[0].file, p.file or "", p.line or 0))
        raise PolicyError(problems) from None
    policy._source = layers[0].file
    return policy


# -- error messages ------------------------------------------------------------------------
def _walk(root, loc: tuple):
    """(deepest node found, its key node, how many parts matched)."""
    import yaml

    node, key_node, depth = root, None, 0
    for part in loc:
        if part == "[key]":
            break
        if isinstance(node, yaml.MappingNode) and not isinstance(part, int):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    node, key_node = v, k
                    break
            else:
                return node, key_node, depth
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node, key_node = node.value[part], None
        else:
            return node, key_node, depth
        depth += 1
    return node, key_node, depth


def _line_of(root, loc: tuple, want_key: bool = False) -> int | None:
    if root is None:
        return None
    node, key_node, _ = _walk(root, loc)
    if want_key and key_node is not None:
        return key_node.start_mark.line + 1
    return node.start_mark.line + 1


def _locate(layers: list[_Layer] | None, loc: tuple, want_key: bool) -> tuple[str | None, int | None]:
    """The file and line of the most derived layer that sets `loc` (or the nearest parent)."""
    if not layers:
        return None, None
    best = None
    for layer in layers:
        if layer.root is None:
            continue
        node, key_node, depth = _walk(layer.root, loc)
        if depth == len([p for p in loc if p != "[key]"]):
            line = (key_node if want_key and key_node is not None else node).start_mark.line + 1
            return layer.file, line
        if best is None or depth > best[0]:
            best = (depth, layer.file, (key_node or node).start_mark.line + 1)
    return (best[1], best[2]) if best else (layers[0].file, None)


# -- the two CLI verbs ---------------------------------------------------------------------
def show(name_or_file: str, *, protect: list[str] | tuple[str, ...] = (), environ: dict[str, str] | None = None,
         overrides: dict[str, Any] | None = None) -> str:
    """`runner policy show`: the effective policy as YAML, after --protect and the environment.
    Secret values are never part of it (only their sources), and the text is redacted anyway."""
    from ..reporting.redact import Redactor

    policy = load(name_or_file, environ).effective(protect=protect, environ=environ, overrides=overrides)
    head = [f"# policy {policy.name} from {policy.source}"]
    head += [f"# WARNING: {w}" for w in policy.warnings()]
    text = "\n".join(head) + "\n" + policy.to_yaml()
    return Redactor().redact(text)


def check(file: str, environ: dict[str, str] | None = None) -> list[str]:
    """`runner policy check`: every problem as `FILE:LINE: path: message`; empty when fine."""
    try:
        load(file, environ)
    except PolicyError as e:
        return [str(p) for p in e.problems]
    return []
