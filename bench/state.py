"""State that holds (issue 47): pause and resume, snapshots, first call from a snapshot, forks,
each beside its raw floor in the same run (the engine's pause of a plain container, `tar -cf` of
the same workspace, a fresh Runner's first call). Figures only, against the issue's goals.

    .venv/bin/python bench/run.py --only state        (or: .venv/bin/python bench/state.py)
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import IMAGE, LABEL, loadavg, timed, workspace  # noqa: E402

MIB = 1024 * 1024


def state_section(n: int, results: dict) -> list[tuple]:
    from executors.docker.engine import connect
    from runner import Runner
    from runner.controller import snapshots as S

    data = Path(tempfile.mkdtemp(prefix="runner-bench-state-"))
    os.environ["RUNNER_DATA"] = str(data)
    rows, notes = [], []
    client = connect()
    cid = subprocess.run(["docker", "run", "-d", "--rm", "--label", LABEL, "--network", "none", IMAGE, "sleep", "600"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        raw_pause = timed(lambda: client.api.pause(cid) or client.api.unpause(cid), n * 2)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    rows.append(("raw engine pause + unpause (docker-py, plain container)", raw_pause, None))

    ws = workspace("runner-bench-state-")
    big = ws / "big"
    big.mkdir()
    for i in range(100):  # 100 MiB in 100 files of 1 MiB
        (big / f"f{i}.bin").write_bytes(os.urandom(MIB))
    with Runner(executor="docker", workspace=ws) as r:
        r.call("bash", {"command": "true"})
        pauses, resumes = [], []

        def pause_resume():
            import time

            t = time.perf_counter()
            r.pause()
            pauses.append(time.perf_counter() - t)
            t = time.perf_counter()
            r.resume()
            resumes.append(time.perf_counter() - t)
        timed(pause_resume, n * 2)
        rows.append(("Runner.pause() of an idle session", pauses[-n * 2:], raw_pause))
        rows.append(("Runner.resume()", resumes[-n * 2:], raw_pause))
        results["state_pause"] = statistics.median(pauses[-n * 2:])
        results["state_resume"] = statistics.median(resumes[-n * 2:])
        out = data / "floor.tar"
        raw_tar = timed(lambda: subprocess.run(["tar", "-C", str(ws), "-cf", str(out), "."], check=True), max(3, n // 4))
        rows.append(("raw `tar -cf` of the 100 MiB workspace", raw_tar, None))
        sids = []
        snap = timed(lambda: sids.append(r.snapshot()), max(3, n // 4), warmup=0)
        rows.append(("Runner.snapshot(), 100 MiB workspace", snap, raw_tar))
        results["state_snapshot_100m"] = statistics.median(snap)
        for s in sids[1:]:
            S.Store().remove(s)
        sid = sids[0]

        def fresh(snapshot=None):
            d = Path(tempfile.mkdtemp(dir=data))
            with Runner(executor="docker", workspace=d, snapshot=snapshot) as r2:
                r2.call("bash", {"command": "true"})
        floor = timed(fresh, max(3, n // 4))
        rows.append(("fresh Runner(): start + first call (empty workspace)", floor, None))
        from_big = timed(lambda: fresh(sid), max(3, n // 4))
        rows.append(("Runner(snapshot=) start + first call, 100 MiB snapshot", from_big, floor))
        (ws / "big").rename(data / "moved-away")
        small = r.snapshot()
        from_small = timed(lambda: fresh(small), max(3, n // 4))
        rows.append(("Runner(snapshot=) start + first call, empty snapshot", from_small, floor))
        results["state_first_call"] = statistics.median(from_small)
        results["state_first_call_100m"] = statistics.median(from_big)
        results["state_fresh"] = statistics.median(floor)

        def fork10():
            forks = r.fork(10)
            for f in forks:
                f.close()
        forks = timed(fork10, max(2, n // 10), warmup=0)
        rows.append(("Runner.fork(10): ten sessions ready (then closed, not timed)", forks, floor))
        results["state_fork10"] = statistics.median(forks)
    notes.append(f"load average {loadavg()} at the end; snapshots under a temporary --data, removed after")
    notes.append("goals (issue 47): pause and resume <= 20 ms each; snapshot of 100 MiB <= 1 s; first call from a "
                 "snapshot <= 300 ms; fork x10 ready <= 2 s. Hibernation and checkpointed processes: not built yet")
    subprocess.run(["rm", "-rf", str(data)])
    return [("state: pause, resume, snapshots, forks (issue 47)", rows, notes)]


if __name__ == "__main__":
    from bench.run import print_table

    res: dict = {}
    for title, rows, notes in state_section(int(sys.argv[1]) if len(sys.argv) > 1 else 10, res):
        print_table(title, rows, notes)
    print({k: round(v * 1000, 1) for k, v in res.items()})
