"""E2B's API on `runner serve` for `make bench`: through the official e2b SDK, Sandbox.create() ->
commands.run("echo hi") -> kill(), p50 and p99 over N runs, and a warm commands.run; the same
through runner's own API (/v1: a session, a bash call, its deletion; a warm bash call), in the
same run, on loopback only.

    .venv/bin/python bench/e2b_api.py [-n 50]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICY = """\
extends: default
name: benche2b
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {memory: 256m, pids: 128}
"""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _line(name: str, xs: list[float]) -> str:
    return f"  {name:<58} p50 {_pct(xs, 0.5) * 1000:8.1f} ms   p99 {_pct(xs, 0.99) * 1000:8.1f} ms   (n={len(xs)})"


def e2b_section(n: int = 50) -> list[str]:
    import httpx

    from bench.serve import serving
    from runner.servers.e2b.app import e2b_key

    tmp = Path(tempfile.mkdtemp(prefix="bench-e2b-"))
    data = tmp / "data"
    data.mkdir()
    pol = tmp / "benche2b.yaml"
    pol.write_text(POLICY)
    key = subprocess.run([sys.executable, "-m", "runner", "tenants", "add", "bench", "--policy", str(pol), "--data",
                          str(data), "--max-sessions", "50", "--calls-per-minute", "100000"],
                         capture_output=True, text=True, check=True).stdout.strip()
    out = []
    with serving(data, "--max-session-ops-per-minute", "100000") as (_proc, url):
        os.environ.update(E2B_API_URL=url + "/e2b", E2B_SANDBOX_URL=url + "/e2b", E2B_API_KEY=e2b_key(key))
        from e2b import Sandbox

        cold, warm = [], []
        for _ in range(n):
            t = time.perf_counter()
            s = Sandbox.create("base")
            s.commands.run("echo hi")
            s.kill()
            cold.append(time.perf_counter() - t)
        s = Sandbox.create("base")
        s.commands.run("echo hi")
        for _ in range(n):
            t = time.perf_counter()
            s.commands.run("echo hi")
            warm.append(time.perf_counter() - t)
        s.kill()
        c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        own_cold, own_warm = [], []
        for _ in range(n):
            t = time.perf_counter()
            sid = c.post("/v1/sessions", json={}).json()["id"]
            c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo hi"}}).raise_for_status()
            c.delete(f"/v1/sessions/{sid}")
            own_cold.append(time.perf_counter() - t)
        sid = c.post("/v1/sessions", json={}).json()["id"]
        c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo hi"}})
        for _ in range(n):
            t = time.perf_counter()
            c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo hi"}}).raise_for_status()
            own_warm.append(time.perf_counter() - t)
        c.delete(f"/v1/sessions/{sid}")
    out.append(_line("e2b SDK: Sandbox.create -> commands.run('echo hi') -> kill", cold))
    out.append(_line("runner /v1: session -> bash 'echo hi' -> delete", own_cold))
    out.append(_line("e2b SDK: warm commands.run('echo hi')", warm))
    out.append(_line("runner /v1: warm bash call 'echo hi'", own_warm))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    print(f"# E2B API on runner serve, load average {open('/proc/loadavg').read().split()[:3]}")
    for line in e2b_section(args.n):
        print(line)
    print(f"# load average at the end {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
