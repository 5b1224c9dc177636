"""What the workspace quota costs per call: wspath.usage (the walk made before every call that
may write when limits.workspace is set) on workspaces of N files, against `du -s` (the same walk
in C) and a raw `docker exec true` in the same run; then a bash call through the Runner (docker)
on a workspace of 10,000 files with the quota set and without, in turns, back to back and with
time between calls (the walk runs as a call ends: an agent's thinking hides it). Figures only.

    .venv/bin/python bench/quota.py [--sizes 1000,10000,100000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import IMAGE, LABEL, loadavg, timed  # noqa: E402
from runner.untrusted.wspath import remove_tree, usage  # noqa: E402


def tree(root: Path, n: int) -> None:
    """n files of 100 bytes, 100 to a directory (so n / 100 directories too)."""
    for i in range(n):
        d = root / f"d{i // 100}"
        if i % 100 == 0:
            d.mkdir()
        (d / f"f{i}").write_bytes(b"x" * 100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("-n", type=int, default=9)
    a = ap.parse_args()
    before = loadavg()
    name = f"runner-bench-quota-{os.getpid()}"
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--label", LABEL, IMAGE, "sleep", "600"],
                   check=True, capture_output=True)
    try:
        exec_ = statistics.median(timed(lambda: subprocess.run(["docker", "exec", name, "true"], check=True), a.n))
        print(f"load {before} -> {loadavg()}; docker exec true: {exec_ * 1000:.1f} ms")
        print(f"{'files':>8} {'entries':>8} {'usage ms':>9} {'du -s ms':>9} {'usage/du':>9} {'usage/exec':>11} "
              f"{'us/entry':>9}")
        for n in (int(x) for x in a.sizes.split(",")):
            root = Path(tempfile.mkdtemp(prefix="runner-bench-quota-"))
            try:
                tree(root, n)
                u = usage(root)
                t_usage = statistics.median(timed(lambda r=root: usage(r, stop_after=1 << 50), a.n))
                t_du = statistics.median(timed(lambda r=root: subprocess.run(["du", "-s", str(r)], check=True,
                                                                      capture_output=True), a.n))
                print(f"{n:>8} {u.entries:>8} {t_usage * 1000:>9.1f} {t_du * 1000:>9.1f} {t_usage / t_du:>9.2f} "
                      f"{t_usage / exec_:>11.2f} {t_usage / u.entries * 1e6:>9.2f}")
            finally:
                remove_tree(root)
        end_to_end(a.n * 3, exec_)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    print(f"load after: {loadavg()}")


def end_to_end(n: int, exec_: float) -> None:
    from bench.run import timed_together
    from runner import Runner

    roots = [Path(tempfile.mkdtemp(prefix="runner-bench-quota-")) for _ in range(2)]
    try:
        for root in roots:
            tree(root, 10_000)
            os.chown(root, 1000, 1000) if os.geteuid() == 0 else None
        with Runner(executor="docker", workspace=roots[0], overrides={"limits.workspace": "1g"}) as on, \
                Runner(executor="docker", workspace=roots[1], overrides={"limits.workspace": None}) as off:
            calls = [lambda r=r: r.call("bash", {"command": "true"}) for r in (on, off)]
            for gap, what in ((0.0, "back to back"), (0.3, "0.3 s apart (the agent thinks)")):
                t_on, t_off = (statistics.median(x) for x in timed_together(calls, n, warmup=2, gap=gap))
                print(f"bash call, 10,000 files, {what}: quota on {t_on * 1000:.1f} ms, off {t_off * 1000:.1f} ms "
                      f"(on/off {t_on / t_off:.2f}, on/docker exec {t_on / exec_:.2f}, "
                      f"off/docker exec {t_off / exec_:.2f})")
    finally:
        for root in roots:
            remove_tree(root)


if __name__ == "__main__":
    main()
