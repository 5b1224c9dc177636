"""Time to first result (issue 52): what a newcomer, a CI step or an agent that shells out waits
for, each taking turns with `docker run --rm` of the same image and command in the same run.

- a fresh Python process (bench/first_child.py): `from runner import Runner`, Runner() and its
  start, the first call, close();
- `runner call bash '{"command": "echo hi"}'`, one process from start to exit;
- `runner session`, from its start to its first answer.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = str(ROOT / ".venv/bin/runner")
CHILD = str(Path(__file__).with_name("first_child.py"))
COMMAND = "echo hi"


def _docker_run(image: str) -> None:
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, "sh", "-c", COMMAND],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)


def _child(ws: str) -> dict:
    """One fresh process's phases (seconds)."""
    p = subprocess.run([sys.executable, CHILD, ws, COMMAND], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"first_child: {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


_call_cpu: list[float] = []  # seconds of CPU (user + system) of each `runner call` process


def _runner_call(ws: str) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([RUNNER, "call", "bash", json.dumps({"command": COMMAND}), "--workspace", ws],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or '"hi' not in p.stdout:
        raise RuntimeError(f"runner call: {p.returncode} {p.stdout[-300:]} {p.stderr[-300:]}")
    _call_cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def _session_first_answer(ws: str) -> float:
    """Seconds from `runner session`'s start to its first answer's line (then it is told to end)."""
    t = time.perf_counter()
    p = subprocess.Popen([RUNNER, "session", "--workspace", ws], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    try:
        p.stdin.write((json.dumps({"id": 1, "tool": "bash", "args": {"command": COMMAND}}) + "\n").encode())
        p.stdin.flush()
        line = p.stdout.readline()
        took = time.perf_counter() - t
        if b'"hi' not in line:
            raise RuntimeError(f"runner session answered {line[:300]!r}")
    finally:
        p.stdin.close()
        p.wait(timeout=120)
    return took


def first_section(n: int, results: dict, image: str, workspace) -> list[tuple]:
    from bench.run import timed_together

    _call_cpu.clear()
    ws = str(workspace("runner-bench-first-"))
    os.chmod(ws, 0o777)
    phases: list[dict] = []
    docker_a, child, call, docker_b, session = timed_together(
        [lambda: _docker_run(image), lambda: phases.append(_child(ws)), lambda: _runner_call(ws),
         lambda: _docker_run(image), lambda: phases.append({"session": _session_first_answer(ws)})], n)
    docker = docker_a + docker_b
    fresh = [p for p in phases if "import" in p]
    firsts = [p["session"] for p in phases if "session" in p]

    def col(key):
        return [p[key] for p in fresh]

    imports, starts, first_calls, closes = col("import"), col("start"), col("call"), col("close")
    start_call = [p["start"] + p["call"] for p in fresh]
    results.update(first_docker_run=statistics.median(docker), first_import=statistics.median(imports),
                   first_start_call=statistics.median(start_call), first_close=statistics.median(closes),
                   first_runner_call=statistics.median(call), first_session=statistics.median(firsts))
    rows = [  # (what, samples, the baseline's samples; None: this is a baseline, "": an absolute figure)
        (f"raw `docker run --rm --network none IMG sh -c '{COMMAND}'`", docker, None),
        ("`runner call bash` (CLI: start to exit)", call, docker),
        ("`runner call bash`: its process's CPU (user + system)", _call_cpu[-len(call):], ""),
        ("`runner session`: start to its first answer", firsts, docker),
        ("fresh process: `from runner import Runner`", imports, ""),
        ("fresh process: Runner() and start", starts, docker),
        ("fresh process: the first call (bash)", first_calls, ""),
        ("fresh process: Runner() + start + first call", start_call, docker),
        ("fresh process: close()", closes, ""),
    ]
    notes = ["each runner figure took turns with the `docker run` beside it (same image, same command); "
             "a fresh process's phases are timed inside it (bench/first_child.py), its interpreter's own "
             "start not counted; the CPU a `runner call` process used is a figure that a loaded machine "
             "(other processes taking turns on the cores) changes less than its time",
             "close() answers at once: the container's removal runs after it (runner/controller/finisher.py), and the "
             "process waits for it before it exits (counted in `runner call`'s figure)"]
    return [("first result: a new process, against `docker run --rm` in the same run", rows, notes)]
