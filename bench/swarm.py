"""Swarm against docker, same run: sandbox start (start() until the first command has answered),
a call's latency (`true` through exec), a tool call through the Runner (agent round trip), and
stop. Needs root: it makes the two-node test swarm of tests/integration/swarm/cluster.py and removes it.

    .venv/bin/python -m bench.swarm [-n 20]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def median_ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.1f} ms (p90 {sorted(xs)[int(len(xs) * 0.9) - 1] * 1000:7.1f})"


def measure(make, n: int) -> dict[str, list[float]]:
    from executors import ExecRequest

    out: dict[str, list[float]] = {"start": [], "call": [], "stop": []}
    for _ in range(max(3, n // 4)):
        t = time.perf_counter()
        ex = make()
        ex.start()
        ex.exec(ExecRequest(argv=["true"]))
        out["start"].append(time.perf_counter() - t)
        for _ in range(n):
            t = time.perf_counter()
            ex.exec(ExecRequest(argv=["true"]))
            out["call"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ex.stop()
        out["stop"].append(time.perf_counter() - t)
    return out


def runner_calls(executor: str, backend: dict | None, n: int) -> dict[str, list[float]]:
    from runner import Runner

    out: dict[str, list[float]] = {"runner start": [], "tool call": []}
    with tempfile.TemporaryDirectory(prefix="runner-bench-swarm-") as ws:
        for _ in range(3):
            t = time.perf_counter()
            with Runner(executor=executor, workspace=ws, preset="all", backend=backend,
                        overrides={"sandbox.lifecycle": "per-session"}) as r:
                r.call("bash", {"command": "true"})
                out["runner start"].append(time.perf_counter() - t)
                for _ in range(n):
                    t = time.perf_counter()
                    r.call("bash", {"command": "true"})
                    out["tool call"].append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="calls per sandbox")
    n = ap.parse_args().n
    from executors.docker import DockerExecutor
    from executors.swarm import SwarmExecutor
    from tests.integration.swarm.cluster import Cluster

    with open("/proc/loadavg") as f:
        print(f"load before: {f.read().split()[:3]}")
    with Cluster() as c:
        rows = {
            "docker (per-session)": measure(lambda: DockerExecutor(labels={"runner.bench": "swarm"}), n),
            "swarm, manager node": measure(lambda: SwarmExecutor(engines=c.engines(), placement=["node.role==manager"]), n),
            "swarm, worker node": measure(lambda: SwarmExecutor(engines=c.engines(), placement=["node.role==worker"]), n),
        }
        rrows = {
            "docker": runner_calls("docker", None, n),
            "swarm": runner_calls("swarm", {"engines": c.engines()}, n),
        }
    with open("/proc/loadavg") as f:
        print(f"load after: {f.read().split()[:3]}")
    print(f"\n{'executor':24} {'start (to first answer)':34} {'exec `true`':34} stop")
    for name, r in rows.items():
        print(f"{name:24} {median_ms(r['start']):34} {median_ms(r['call']):34} {median_ms(r['stop'])}")
    print(f"\n{'Runner':24} {'start (to first tool call)':34} tool call `bash true`")
    for name, r in rrows.items():
        print(f"{name:24} {median_ms(r['runner start']):34} {median_ms(r['tool call'])}")


if __name__ == "__main__":
    main()
