"""Ship the in-sandbox agent (runner/agent, stdlib only) into any sandbox over its stdin.

The sandbox runs `python3 -S -E -u -c BOOTSTRAP`; the bootstrap reads (unbuffered: nothing of the
protocol may sit in a reader it leaves behind) the payload: each module's code object (from
Python's own cache of it here, _code()) and its source. It installs an in-memory importer for the package
`runner_agent` (a plain finder and loader: importlib.abc would import importlib.resources,
pathlib, zipfile and tempfile, 25 ms of a sandbox's start, measured) that runs the code objects
when the sandbox's Python has this one's bytecode (its magic number) and compiles the sources
otherwise, and starts the agent's JSON-lines loop on the same stdin. Its working directory is the
workspace, so the first thing it does is drop '' from sys.path: a `json.py` there must not become
the agent. Nothing is written to the sandbox's disk, so this works with a read-only root, in any
image with python3 >= 3.9, and over any transport. Nothing the sandbox sends is unmarshalled here.

INIT: as a container's pid 1 (no docker-init in front: it would hold the same stdio and is
dumpable), the bootstrap first forks. The parent stays pid 1, lets go of stdio and reaps every
orphan the tools leave (each zombie holds a slot under the pids limit) until the agent, its child,
ends, then ends the container with the agent's status. It forks before anything else is loaded
but ctypes (for PR_SET_DUMPABLE, which both inherit): forked later (after the payload and the agent's imports, as it was), its copy of every page the
agent then wrote was its own, 4.0 against 2.5-2.8 MiB (Pss, runner/base), 0.86 MiB of each idle
sandbox. Non-dumpable like the agent, it holds nothing a tool could open.
"""
from __future__ import annotations

import functools
import importlib
import json
import marshal
import os
import sys
import threading
from pathlib import Path
from types import CodeType

PACKAGE = "runner_agent"
# Modules of executors shipped beside the agent's own (standard library only), by their name in
# the bundle: the network allowlist's grammar, which the policy and the egress proxy read too.
SHIPPED = {"allowlist": "executors.allowlist"}

BOOTSTRAP = r"""
import os, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
if os.getpid() == 1:  # the container's init (no docker-init): see INIT
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: both processes (inherited)
    except (OSError, AttributeError, ImportError):
        pass
    _agent = os.fork()
    if _agent:
        os.closerange(0, 3)
        while True:
            try:
                _pid, _st = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)
            if _pid == _agent:
                _c = os.waitstatus_to_exitcode(_st)
                os._exit(_c if _c >= 0 else 128 - _c)
import json, marshal
from importlib.machinery import ModuleSpec
from importlib._bootstrap_external import MAGIC_NUMBER
def _read(n):
    parts, got = [], 0
    while got < n:
        part = os.read(0, n - got)
        if not part:
            sys.exit("runner agent: the bundle ended early")
        parts.append(part)
        got += len(part)
    return b"".join(parts)
_n = b""
while not _n.endswith(b"\n") and len(_n) < 32:
    _n += _read(1)
_head = json.loads(_read(int(_n)).decode("utf-8"))
_body = _read(sum(c + s for _, _, c, s in _head["modules"]))
_same = _head["magic"] == MAGIC_NUMBER.hex()
_mods, _at = {}, 0
for _name, _pkg, _c, _s in _head["modules"]:
    _code = _same and _c > 0
    _mods[_name] = (_pkg, _code, _body[_at:_at + _c] if _code else _body[_at + _c:_at + _c + _s])
    _at += _c + _s
class _Bundle:
    def find_spec(self, name, path=None, target=None):
        if name in _mods:
            return ModuleSpec(name, self, is_package=_mods[name][0])
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        name = module.__name__
        is_pkg, code, body = _mods[name]
        exec(marshal.loads(body) if code else compile(body, "<%s>" % name, "exec"), module.__dict__)
sys.meta_path.insert(0, _Bundle())
del _n, _head, _at, _body  # (what is kept: each module's code object, or its source, not both)
import runner_agent.server
runner_agent.server.main()
"""


def agent_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "agent"


@functools.lru_cache(maxsize=1)
def _sources() -> dict[str, tuple[bool, Path | None, bytes, "os.stat_result | None"]]:
    """{module name in the bundle: (is a package, its file, its bytes, the file's stat as they were
    read)}: runner/agent and what SHIPPED names."""
    files: list[tuple[str, bool, Path]] = []
    for f in sorted(agent_dir().glob("*.py")):
        if f.name != "__main__.py":
            files.append((PACKAGE, True, f) if f.name == "__init__.py" else (f"{PACKAGE}.{f.stem}", False, f))
    for name, module in SHIPPED.items():
        files.append((f"{PACKAGE}.{name}", False, Path(importlib.import_module(module).__file__)))
    out: dict = {PACKAGE: (True, None, b"", None)}
    for name, is_pkg, f in files:
        with open(f, "rb") as fh:
            out[name] = (is_pkg, f, fh.read(), os.fstat(fh.fileno()))
    return out


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, tuple[bool, str]]:
    """{module name in the bundle: (is a package, source)}, decoded as an import decodes it."""
    from importlib.util import decode_source

    return {name: (is_pkg, decode_source(data)) for name, (is_pkg, _, data, _) in _sources().items()}


_lock = threading.Lock()  # held while the payload is built
_once = threading.Lock()  # only for prepare()'s flag: a second start never waits out the build here
_prepared = False


def payload() -> bytes:
    """A length line, a JSON head {magic, modules: [[name, is_package, code bytes, source bytes]]},
    then each module's code object (marshal) and source, in that order. A sandbox whose Python
    has this one's bytecode (the magic number) runs the code objects, any other compiles the
    sources: compiling the agent took 47-53 ms of a sandbox's CPU at each start (measured in
    runner/base), unmarshalling it 1.4 ms. Built once per process, by the first caller (prepare()):
    ~12 ms with the code objects from __pycache__, ~80 without (_code)."""
    with _lock:
        return _payload()


@functools.lru_cache(maxsize=1)
def _payload() -> bytes:
    from importlib.util import MAGIC_NUMBER

    head, parts = [], []
    for name, (is_pkg, src) in modules().items():
        _, path, data, st = _sources()[name]
        code = marshal.dumps(_code(name, path, data, st))
        text = src.encode("utf-8")
        head.append([name, is_pkg, len(code), len(text)])
        parts += [code, text]
    head_bytes = json.dumps({"magic": MAGIC_NUMBER.hex(), "modules": head}).encode()
    return str(len(head_bytes)).encode() + b"\n" + head_bytes + b"".join(parts)


def _code(name: str, path: Path | None, data: bytes, st) -> CodeType:
    """The module's code object (of data, the file's bytes as the payload ships them), its file
    named <name> (not the host's path) in every function's code. Compiled with optimize=0 (asserts
    kept, as the sandbox would compile it). Compiling all of the agent takes ~80 ms of a process's
    first session, on a thread that holds the GIL while the session's own thread waits for the
    engine (the payload 539 KB, 2026-11-28); so where this process compiles with optimize=0 anyway,
    the code comes from the cache Python's own import keeps beside the file (__pycache__) when that
    is of these very bytes (_cached), else it is compiled and written there as an import writes it
    (unless PYTHONDONTWRITEBYTECODE): ~10 ms. That cache is as trusted as the source beside it,
    which this process imports too (runner/controller/lent_shells.py)."""
    if path is None or sys.flags.optimize:
        return compile(data, f"<{name}>", "exec", dont_inherit=True, optimize=0)
    from importlib.util import cache_from_source

    pyc = cache_from_source(str(path))
    code = _cached(pyc, data, st)
    if code is None:
        code = compile(data, str(path), "exec", dont_inherit=True, optimize=0)
        if not sys.dont_write_bytecode:
            _write_cache(pyc, code, st)
    return _renamed(code, f"<{name}>")


def _cached(pyc: str, data: bytes, st) -> "CodeType | None":
    """The code in pyc if it was compiled from data (PEP 552: a hash-based pyc's hash of the source,
    checked or not; a timestamp pyc's mtime and size, those of the file data was read from); None
    if not, or unreadable."""
    from importlib.util import MAGIC_NUMBER, source_hash

    try:
        with open(pyc, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if len(raw) < 16 or raw[:4] != MAGIC_NUMBER:
        return None
    flags = int.from_bytes(raw[4:8], "little")
    if flags & ~0b11:
        return None
    if flags & 0b1:
        fresh = raw[8:16] == source_hash(data)
    else:
        fresh = (int.from_bytes(raw[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
                 and int.from_bytes(raw[12:16], "little") == st.st_size & 0xFFFFFFFF)
    if not fresh:
        return None
    try:
        code = marshal.loads(raw[16:])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def _write_cache(pyc: str, code: CodeType, st) -> None:
    """A timestamp pyc of code (PEP 552) at pyc, written whole (a temporary name, then a rename) as
    an import writes it; nothing if it cannot be (a read-only install)."""
    from importlib.util import MAGIC_NUMBER

    body = (MAGIC_NUMBER + (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
    tmp = f"{pyc}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(pyc), mode=0o755, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, (st.st_mode & 0o666) | 0o200)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, pyc)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _renamed(code: CodeType, filename: str) -> CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def prepare() -> None:
    """Build the payload in the background, while the engine makes the first sandbox."""
    global _prepared
    with _once:
        if _prepared:
            return
        _prepared = True
    threading.Thread(target=payload, name="runner-bundle", daemon=True).start()


# The interpreter a bare name (python3) names, found as the engine would find it, on the
# sandbox's PATH, but in a directory the sandbox cannot write and as a file it cannot write:
# an image's PATH often leads with the project's own bin (/workspace/.venv/bin), where a python3
# the sandbox wrote would become the next session's agent, with its key. Where every one is
# writable (a root sandbox whose root file system is writable: it could replace any of them)
# the first is taken, as before. POSIX sh, no fork: ~1 ms of the sandbox's start.
FIND_PYTHON = (
    'set -f; IFS=:; first=; for d in $PATH; do case $d in /*) ;; *) continue ;; esac; '
    'p=$d/$0; [ -f "$p" ] && [ -x "$p" ] || continue; [ -n "$first" ] || first=$p; '
    'if [ ! -w "$d" ] && [ ! -w "$p" ]; then unset IFS; exec "$p" "$@"; fi; done; unset IFS; '
    '[ -n "$first" ] && exec "$first" "$@"; echo "runner: no $0 on PATH ($PATH)" >&2; exit 127')


def argv(python: str = "python3") -> list[str]:
    """The agent's command. python: an interpreter's path, or a name looked for as FIND_PYTHON does.
    -S: no site (the agent is the standard library and this bundle; site's .pth files cost up
    to 40 ms on some hosts); -E: no PYTHON* variable of the sandbox's environment (an image's
    PYTHONPATH of the workspace put files the sandbox writes ahead of the standard library for
    every module the agent loads, and PYTHONHOME the library itself); -u: unbuffered, as the
    protocol needs."""
    flags = ["-S", "-E", "-u", "-c", BOOTSTRAP]
    if "/" in python:
        return [python, *flags]
    return ["/bin/sh", "-c", FIND_PYTHON, python, *flags]
