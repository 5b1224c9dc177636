"""Ship the in-sandbox agent (runner/toolbox, stdlib only) into any sandbox over its stdin.

The sandbox runs `python3 -S -u -c BOOTSTRAP`; the bootstrap reads (unbuffered: nothing of the
protocol may sit in a reader it leaves behind) one length line and a JSON map
of module sources, installs an in-memory importer for the package `runner_agent` (a plain
finder and loader: importlib.abc would import importlib.resources, pathlib, zipfile and tempfile,
25 ms of a sandbox's start, measured), and starts
the agent's JSON-lines loop on the same stdin. Its working directory is the workspace, so the
first thing it does is drop '' from sys.path: a `json.py` there must not become the agent. Nothing is written to the sandbox's disk, so
this works with a read-only root, in any image with python3 >= 3.9, and over any transport.
"""
from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path

PACKAGE = "runner_agent"
# Modules of executors shipped beside the agent's own (standard library only), by their name in
# the bundle: the network allowlist's grammar, which the policy and the egress proxy read too.
SHIPPED = {"allowlist": "executors.allowlist"}

BOOTSTRAP = r"""
import os, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import json
from importlib.machinery import ModuleSpec
def _read(n):
    out = b""
    while len(out) < n:
        part = os.read(0, n - len(out))
        if not part:
            sys.exit("runner agent: the bundle ended early")
        out += part
    return out
_n = b""
while not _n.endswith(b"\n") and len(_n) < 32:
    _n += _read(1)
_mods = json.loads(_read(int(_n)).decode("utf-8"))
class _Bundle:
    def find_spec(self, name, path=None, target=None):
        if name in _mods:
            return ModuleSpec(name, self, is_package=_mods[name][0])
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        is_pkg, src = _mods[module.__name__]
        exec(compile(src, "<%s>" % module.__name__, "exec"), module.__dict__)
sys.meta_path.insert(0, _Bundle())
del _n
import runner_agent.server
runner_agent.server.main()
"""


def agent_dir() -> Path:
    return Path(__file__).resolve().parent / "toolbox"


@functools.lru_cache(maxsize=1)
def payload() -> bytes:
    """Length line + JSON {module: [is_package, source]} of every module of runner/toolbox."""
    mods: dict[str, list] = {PACKAGE: [True, ""]}
    for f in sorted(agent_dir().glob("*.py")):
        if f.name == "__init__.py":
            mods[PACKAGE] = [True, f.read_text()]
        elif f.name != "__main__.py":
            mods[f"{PACKAGE}.{f.stem}"] = [False, f.read_text()]
    for name, module in SHIPPED.items():
        mods[f"{PACKAGE}.{name}"] = [False, Path(importlib.import_module(module).__file__).read_text()]
    body = json.dumps(mods).encode()
    return str(len(body)).encode() + b"\n" + body


def argv(python: str = "python3") -> list[str]:
    # -S: no site (the agent is the standard library and this bundle; site's .pth files cost up
    # to 40 ms on some hosts); -u: unbuffered, as the protocol needs
    return [python, "-S", "-u", "-c", BOOTSTRAP]
