"""How a run of bash calls speeds up after a pause, against a local fork after the same pause.

    .venv/bin/python bench/ramp.py [--rounds 8] [--calls 240] [--warm 200]

Rounds of: WARM calls back to back untimed (a Runner's bash `echo hi`, docker), a pause (the
machine idle for 2, 64 or 200 ms, or 64 ms of local forks, as the turns of `make bench` have
it), then CALLS calls timed; and the same for forks (`sh -c 'echo hi'`). Prints the median by
position in the run:
how many calls it takes the kernel to run the sandbox's processes on both CPUs again, as it
does under a steady run (DESIGN.md, issue 17). Not part of `make bench` (~1 minute); never part
of the test suite.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAUSES = (("idle", 0.002), ("idle", 0.064), ("idle", 0.2), ("forks", 0.064))


def _fork() -> None:
    subprocess.run(["sh", "-c", "echo hi"], stdout=subprocess.DEVNULL, check=True)


def _pause(kind: str, seconds: float) -> None:
    if kind == "idle":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _fork()


def _buckets(n: int) -> list[tuple[int, int]]:
    edges = [e for e in [0, 5, 20, 40, *range(80, n, 40)] if e < n] + [n]
    return list(itertools.pairwise(edges))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=240, help="calls (and forks) after each pause")
    ap.add_argument("--warm", type=int, default=200, help="untimed calls (and forks) before each pause")
    args = ap.parse_args()
    from runner import Runner

    runs = {(what, p): [[] for _ in range(args.calls)] for p in PAUSES for what in ("call", "fork")}
    with tempfile.TemporaryDirectory() as ws, Runner(executor="docker", workspace=ws, preset="all") as r:
        def call() -> None:
            r.call("bash", {"command": "echo hi"})

        for _ in range(200):
            call()
        for _ in range(args.rounds):
            for p in PAUSES:
                for what, fn in (("call", call), ("fork", _fork)):
                    for _ in range(args.warm):
                        fn()
                    _pause(*p)
                    for xs in runs[(what, p)]:
                        t = time.perf_counter()
                        fn()
                        xs.append(time.perf_counter() - t)
    buckets = _buckets(args.calls)
    print(f"medians in ms by position after the pause ({args.rounds} rounds)")
    print("after".ljust(22) + "".join(f"{a + 1}-{b}".rjust(9) for a, b in buckets))
    for p in PAUSES:
        for what in ("call", "fork"):
            cells = (statistics.median(x for xs in runs[(what, p)][a:b] for x in xs) * 1e3 for a, b in buckets)
            print(f"{p[1] * 1e3:.0f} ms {p[0]}, {what}".ljust(22) + "".join(f"{c:9.3f}" for c in cells))


if __name__ == "__main__":
    main()
