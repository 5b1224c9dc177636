"""Custom-tool figures for `make bench`: a call through the Runner (validation, the sandbox's
agent, the tool's own process, redaction, audit) against forking the same tool on this machine."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.run import run, timed

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tools"


def custom_section(n: int):
    from runner import Runner

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-custom-"))
    ws = tmp / "ws"
    (ws / "tools").mkdir(parents=True)
    (ws / ".runner" / "tools").mkdir(parents=True)
    shutil.copy2(EXAMPLES / "executable" / "stamp", ws / "tools" / "stamp")
    shutil.copy2(EXAMPLES / "describe-execute" / "greet.py", ws / ".runner" / "tools" / "greet.py")
    shutil.copytree(EXAMPLES / "lua", ws / "tools", dirs_exist_ok=True)
    (ws / "notes.txt").write_text("apple\nbanana\napple pie\n")
    calls = n * 5
    rows = []
    fork_exe = timed(lambda: run([str(ws / "tools" / "stamp"), "a", "b"]), calls)
    rows.append(("local fork+exec of the tool `stamp a b`", fork_exe, None))
    env = dict(os.environ, TOOL_ACTION="execute")
    greet = ["/usr/bin/env", "python3", str(ws / ".runner" / "tools" / "greet.py")]  # as its shebang says
    stdin = json.dumps([{"name": "who", "value": "x"}]).encode()
    fork_script = timed(lambda: subprocess.run(greet, input=stdin, env=env, capture_output=True), calls)
    rows.append(("local fork+exec of `greet.py` (TOOL_ACTION=execute)", fork_script, None))
    have_lupa = subprocess.run(["docker", "run", "--rm", "--network", "none", "runner/base:latest", "python3", "-c",
                                "import lupa"], capture_output=True).returncode == 0
    for executor in ("local", "docker"):
        with Runner(executor=executor, workspace=ws, preset="all") as r:
            names = {s.name for s in r.tools()}
            exe = timed(lambda: r.call("stamp", {"args": "a b"}), calls, warmup=2)
            rows.append((f"Runner({executor}) executable tool (vs its fork)", exe, fork_exe))
            script = timed(lambda: r.call("greet", {"who": "x"}), calls, warmup=2)
            rows.append((f"Runner({executor}) describe/execute script (vs its fork)", script, fork_script))
            if "line_count" in names and (executor == "local" or have_lupa):
                lua = timed(lambda: r.call("line_count", {"path": "notes.txt", "word": "apple"}), calls, warmup=2)
                rows.append((f"Runner({executor}) Lua record via lupa (vs the script's fork)", lua, fork_script))
    shutil.rmtree(tmp, ignore_errors=True)
    return [("custom tools: a call through the Runner against forking the tool", rows)]
