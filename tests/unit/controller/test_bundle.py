"""The agent's bootstrap as a sandbox runs it: a real interpreter fed the bundle on stdin."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from runner.controller import bundle


def _hello() -> bytes:
    return json.dumps({"op": "hello", "workspace": os.getcwd(), "key": os.urandom(32).hex()}).encode() + b"\n"


def _agent(*flags: str) -> subprocess.Popen:
    argv = bundle.argv(sys.executable)
    return subprocess.Popen([argv[0], *flags, *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_an_agent_whose_input_ends_while_it_still_loads_a_tool_module_ends_cleanly(monkeypatch):
    """Input ending while warm_up() is still importing a tool module: the agent's shutdown
    found the half-imported module (in sys.modules, without its `shutdown` yet) and died with
    an AttributeError. Here the half-imported module is put in place before the agent runs."""
    import io
    import types

    from runner.agent import server

    half = types.ModuleType("runner.agent.plugins")  # as sys.modules holds it mid-import
    monkeypatch.setitem(sys.modules, "runner.agent.plugins", half)
    monkeypatch.chdir(os.getcwd())  # the agent changes to its workspace: this one
    r, w = os.pipe()
    try:
        server.main(io.BytesIO(_hello()), w)  # returns at the end of input
        os.close(w)
        w = -1
        with os.fdopen(r, "rb") as out:
            r = -1
            reply = json.loads(out.readline().split(b" ", 1)[1])  # a framed line: MAC, space, JSON
        assert reply["op"] == "hello" and reply["ok"] is True
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)


def test_the_bootstrap_imports_no_importlib_abc_and_no_site():
    """What the agent loads before its hello is a sandbox's start time: importlib.abc alone
    pulled in importlib.resources, pathlib, zipfile and tempfile (25 ms), site its .pth files."""
    p = _agent("-X", "importtime")
    out, err = p.communicate(bundle.payload() + _hello(), timeout=60)
    assert out, err.decode()[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in err.decode().splitlines() if line.startswith("import time:")}
    assert "runner_agent.server" in loaded  # the measurement saw the agent's own imports
    assert not loaded & {"importlib.abc", "importlib.resources", "site", "pathlib", "zipfile"}, sorted(loaded)


def _loaded_then(code: str) -> str:
    """The stdout of the bootstrap run with `code` in place of starting the agent (the bundle
    installed, runner_agent importable), in a real interpreter fed the payload."""
    argv = bundle.argv(sys.executable)
    out = subprocess.run([*argv[:-1], bundle.BOOTSTRAP.replace("runner_agent.server.main()", code)],
                         input=bundle.payload(), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return out.stdout.decode()


def test_the_agent_loads_no_module_whose_fork_hooks_a_concurrent_fork_can_unbalance():
    """logging and concurrent.futures register fork hooks that take a lock before a fork and
    release it after. The zygote's thread forks with a preexec_fn, which runs those hooks: a
    first import of either in another thread while that fork was under way added the release
    without the take, and it freed the lock a custom_describe held (RuntimeError: release
    unlocked lock, every custom tool of the session lost, in CI). Every tool module of the
    agent, loaded as the agent loads them (warm_up's and those a call loads), must pull in neither."""
    stdout = _loaded_then(
        "[__import__('runner_agent.' + m) for m in sorted({m for m, _ in runner_agent.server.TOOLS.values()})]\n"
        "print(sorted(m for m in sys.modules if m in ('logging', 'concurrent.futures') or m.startswith('concurrent.')))")
    assert stdout.strip() == "[]"


def test_the_agent_loads_no_openssl_until_a_long_body():
    """hashlib and hmac load OpenSSL's libcrypto: 2-4 ms of every sandbox's start and 0.6 MiB of
    its memory. The agent's MACs and keys use the builtin BLAKE2b and SHA-256 until a line of
    SMALL_BODY bytes or more, whatever warm_up() loads, and the long line is still HMAC-SHA256."""
    stdout = _loaded_then(
        "import runner_agent.server as s, runner_agent.wire as w, runner_agent.lender, runner_agent.zygote\n"
        "[s.tool_module(m) for m in s.MODULES]\n"
        "ssl = lambda: sorted(m for m in sys.modules if m in ('_hashlib', 'hashlib', 'hmac', '_ssl'))\n"
        "print(ssl())\n"
        "k = w.direction_key(bytes(32), w.TO_AGENT)\n"
        "w.Signer(k).frame_body(b'x' * (w.SMALL_BODY - 1))\n"
        "print(ssl())\n"
        "line = w.Signer(k).frame_body(b'[' + b' ' * w.SMALL_BODY + b']')\n"
        "print(ssl())\n"
        "print(line[:64].decode())")
    before, short, long_, mac = stdout.splitlines()
    assert before == short == "[]"
    assert "_hashlib" in long_ or "hmac" in long_  # OpenSSL's SHA-256 for the long body
    import hashlib
    import hmac

    from runner.agent import wire

    key = hmac.new(bytes(32), wire.TO_AGENT, hashlib.sha256).digest()
    assert wire.direction_key(bytes(32), wire.TO_AGENT) == key
    body = b"[" + b" " * wire.SMALL_BODY + b"]"
    assert mac == hmac.new(key, (0).to_bytes(8, "big") + body, hashlib.sha256).hexdigest()


def test_the_agents_warm_up_loads_neither_tempfile_nor_shutil():
    """tempfile and shutil, with what they import (random, bz2, lzma, zlib), were 5-6 ms of the
    CPU and 0.56 MiB of every sandbox for four functions (fsutil has its own); datetime, difflib
    and base64 another 3-4 ms for get_time, edit's diff and an image's read."""
    stdout = _loaded_then(
        "import runner_agent.server as s, runner_agent.lender, runner_agent.zygote\n"
        "[s.tool_module(m) for m in s.MODULES]\n"
        "print(sorted(m for m in sys.modules if m in ('tempfile', 'shutil', 'random', 'bz2', 'lzma', 'zlib', 'difflib', 'datetime', 'base64')))")
    assert stdout.strip() == "[]"


def test_hmac_sha256_of_the_builtin_hash_is_hmacs():
    import hashlib
    import hmac

    from runner.agent import wire

    for n in (0, 1, 32, 63, 64, 65, 200):
        key = os.urandom(n)
        for data in (b"", b"x", os.urandom(5000)):
            assert wire.hmac_sha256(key, data) == hmac.new(key, data, hashlib.sha256).digest()


def _retouched(magic: str | None = None, garble: str = "") -> bytes:
    """The payload with another magic number in its head, and each module's code object or
    source (`garble`) overwritten by as many bytes that are neither."""
    import json as j

    data = bundle.payload()
    n, rest = data.split(b"\n", 1)
    head, body = j.loads(rest[:int(n)]), bytearray(rest[int(n):])
    at = 0
    for _, _, code, src in head["modules"]:
        if garble == "code":
            body[at:at + code] = b"\0" * code
        elif garble == "source" and src:
            body[at + code:at + code + src] = b"raise SystemExit('compiled the source')".ljust(src, b" ")
        at += code + src
    if magic is not None:
        head["magic"] = magic
    new = j.dumps(head).encode()
    return str(len(new)).encode() + b"\n" + new + bytes(body)


def _hello_reply(payload: bytes) -> dict:
    p = _agent()
    out, err = p.communicate(payload + _hello(), timeout=60)
    assert out, err.decode()[-2000:]
    return json.loads(out.splitlines()[0].split(b" ", 1)[1])


def test_a_sandbox_with_this_bytecode_runs_the_code_objects_not_the_sources():
    """Compiling the agent was ~50 ms of every sandbox's start: with the same magic number the
    sources are not compiled at all (here they would end the agent if they were)."""
    assert _hello_reply(_retouched(garble="source"))["ok"] is True


def test_a_sandbox_with_other_bytecode_compiles_the_sources():
    """Another Python (another magic number) never unmarshals the code objects: garbled, they
    would crash it."""
    assert _hello_reply(_retouched(magic="00000000", garble="code"))["ok"] is True


def test_the_code_objects_keep_their_asserts_whatever_this_process_runs_with():
    """Compiled here with optimize=0: a controller under `python -O` ships what the sandbox would
    have compiled (zygote.py asserts at its top level)."""
    code = ("import dis, json, marshal, runner.controller.bundle as b\n"
            "n, rest = b.payload().split(b'\\n', 1); head, at = json.loads(rest[:int(n)]), int(n)\n"
            "for name, pkg, c, s in head['modules']:\n"
            "    if name == 'runner_agent.zygote':\n"
            "        print(any(i.opname == 'LOAD_ASSERTION_ERROR' for i in dis.get_instructions(marshal.loads(rest[at:at + c]))))\n"
            "    at += c + s\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True"], out.stderr[-2000:]


def test_the_code_objects_are_the_sources_compiled_and_name_no_host_path():
    """The code objects come from the cache Python's import keeps (__pycache__) where it has one:
    each must be what compiling the source sent beside it makes, and every function's code must
    name the module (<runner_agent.x>), not the file on the host."""
    import json as j
    import marshal

    data = bundle.payload()
    n, rest = data.split(b"\n", 1)
    head, at = j.loads(rest[:int(n)]), int(n)
    assert len(head["modules"]) == len(bundle.modules())

    def codes(code):
        yield code
        for c in code.co_consts:
            if isinstance(c, type(code)):
                yield from codes(c)

    for name, _, c, s in head["modules"]:
        code, src = marshal.loads(rest[at:at + c]), rest[at + c:at + c + s].decode()
        at += c + s
        assert code == compile(src, f"<{name}>", "exec", dont_inherit=True, optimize=0), name
        assert {x.co_filename for x in codes(code)} == {f"<{name}>"}, name


def test_a_cached_code_object_is_used_only_if_it_is_of_the_bytes_shipped(tmp_path, monkeypatch):
    """The code comes from __pycache__ only when that pyc was compiled from the very bytes the
    payload ships: an unchecked hash-based pyc (which an import never checks) of an older source
    is not taken; a missing one is written, as an import writes it, and then taken."""
    import importlib.util
    import py_compile

    src = tmp_path / "mod.py"
    src.write_text("A = 1\n")
    pyc = importlib.util.cache_from_source(str(src))
    py_compile.compile(str(src), cfile=pyc, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    src.write_text("A = 22\n")

    def shipped(path):
        data = path.read_bytes()
        code = bundle._code("runner_agent.mod", path, data, os.stat(path))
        ns: dict = {}
        exec(code, ns)
        return ns["A"], code

    assert shipped(src)[0] == 22
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    os.unlink(pyc)
    value, code = shipped(src)
    assert value == 22 and os.path.exists(pyc)  # written
    assert bundle._cached(pyc, src.read_bytes(), os.stat(src)) is not None  # and of these bytes
    assert shipped(src)[1] == code


def test_the_sources_are_read_as_utf_8_whatever_the_locale():
    """The shipped sources and the code objects agree under any locale: a host whose locale is
    ASCII read four of the agent's modules (non-ASCII text) as something else, or not at all."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    code = ("import locale, runner.controller.bundle as b\n"
            "print(locale.getpreferredencoding(False))\n"
            "print(sum(not s.isascii() for _, s in b.modules().values()), len(b.payload()) > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    enc, mods = out.stdout.splitlines()
    assert enc.lower().replace("-", "") in ("ansi_x3.41968", "ascii"), enc  # (the locale this test means)
    assert int(mods.split()[0]) >= 1 and mods.split()[1] == "True", mods
