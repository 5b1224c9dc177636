"""`make bench`: runner against raw `docker run --rm`, `docker exec` and a local fork, in one run.

Prints medians (and p99 where many samples are cheap) and each figure's ratio to its baseline.
Never part of the test suite; no thresholds here, only figures.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
IMAGE = "runner/base:latest"
LABEL = "runner.bench=1"


def timed(fn, n: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


def run(argv: list[str]) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)


def exec_section(n: int) -> list[tuple]:
    from executors.docker import DockerExecutor
    from executors.local import LocalExecutor

    rows = []
    fork = timed(lambda: run(["sh", "-c", "true"]), n * 5)
    rows.append(("local fork+exec `sh -c true`", fork, None))
    local = LocalExecutor("/tmp")
    rows.append(("executors.local run(['true'])", timed(lambda: local.run(["true"]), n * 5), fork))

    docker_run = timed(lambda: run(["docker", "run", "--rm", "--network", "none", IMAGE, "true"]), n)
    rows.append(("raw `docker run --rm IMG true`", docker_run, None))
    runner_exec = timed(lambda: run([str(ROOT / ".venv/bin/runner"), "exec", "--", "true"]), n)
    rows.append(("`runner exec -- true` (CLI, per-call)", runner_exec, docker_run))
    percall = DockerExecutor(lifecycle="per-call", labels={"runner.bench": "1"})
    percall.start()
    rows.append(("DockerExecutor per-call run(['true'])", timed(lambda: percall.run(["true"]), n), docker_run))
    percall.stop()

    cid = subprocess.run(["docker", "run", "-d", "--rm", "--label", LABEL, "--network", "none", IMAGE, "sleep", "600"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        docker_exec = timed(lambda: run(["docker", "exec", cid, "true"]), n * 2)
        rows.append(("raw `docker exec CID true`", docker_exec, None))
        with DockerExecutor(labels={"runner.bench": "1"}) as session:
            rows.append(("DockerExecutor per-session run(['true'])", timed(lambda: session.run(["true"]), n * 2), docker_exec))
    finally:
        run(["docker", "rm", "-f", cid])
    helps = timed(lambda: run([str(ROOT / ".venv/bin/runner"), "--help"]), n)
    rows.append(("`runner --help` start-up", helps, None))
    pyfloor = timed(lambda: run([sys.executable, "-c", "pass"]), n)
    rows.append(("python3 -c pass (floor for any Python CLI)", pyfloor, None))
    return rows


def print_table(title: str, rows: list[tuple]) -> None:
    print(f"\n## {title}\n")
    print(f"| {'what':52} | {'n':>4} | {'median ms':>9} | {'p99 ms':>8} | {'ratio':>14} |")
    print(f"|{'-' * 54}|{'-' * 6}|{'-' * 11}|{'-' * 10}|{'-' * 16}|")
    for name, xs, base in rows:
        med = statistics.median(xs) * 1000
        ratio = f"{med / (statistics.median(base) * 1000):.2f}x baseline" if base else "baseline"
        print(f"| {name:52} | {len(xs):4} | {med:9.1f} | {p99(xs) * 1000:8.1f} | {ratio:>14} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=20, help="samples per docker measurement")
    args = ap.parse_args()
    print(f"# runner bench, {time.strftime('%Y-%m-%d %H:%M')}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores")
    print_table("commands: runner vs raw docker and a local fork", exec_section(args.n))
    try:
        from bench.tools import tools_section
    except ImportError:
        return
    for title, rows in tools_section(args.n):
        print_table(title, rows)
    from bench.custom import custom_section

    for title, rows in custom_section(args.n):
        print_table(title, rows)
    try:  # runner serve under load (the extra runner[serve])
        from bench.serve import serve_section
        import fastapi  # noqa: F401
    except ImportError:
        return
    serve_section()


if __name__ == "__main__":
    main()
