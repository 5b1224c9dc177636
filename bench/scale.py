"""Density and throughput for `make bench`: many idle sessions at once, and sandboxes per second.

Every container made here carries this process's runner labels (runner.owner.pid), and each
section removes all of them on the way out, whatever happened; nobody else's are touched.
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.run import HARDENED, IMAGE, LABEL, timed, workspace

GIB = 1024 ** 3


def _mine() -> list[str]:
    """Ids of the containers this process made (runner's own label), however they got there."""
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=runner.owner.pid={os.getpid()}"],
                         capture_output=True, text=True).stdout.split()
    out += subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter", f"label={LABEL}",
                           "--filter", f"label=runner.bench.pid={os.getpid()}"], capture_output=True, text=True).stdout.split()
    return sorted(set(out))


def sweep() -> None:
    left = _mine()
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True)


def memory_of(cid: str) -> int | None:
    """Bytes the container's cgroup holds less its inactive file cache (what `docker stats` shows)."""
    for base in (f"/sys/fs/cgroup/memory/docker/{cid}", f"/sys/fs/cgroup/docker/{cid}",
                 f"/sys/fs/cgroup/system.slice/docker-{cid}.scope"):
        try:
            if os.path.exists(base + "/memory.usage_in_bytes"):  # cgroup v1
                usage = int(Path(base, "memory.usage_in_bytes").read_text())
                stat = dict(line.split() for line in Path(base, "memory.stat").read_text().splitlines())
                return usage - int(stat.get("total_inactive_file", 0))
            if os.path.exists(base + "/memory.current"):  # cgroup v2
                usage = int(Path(base, "memory.current").read_text())
                stat = dict(line.split() for line in Path(base, "memory.stat").read_text().splitlines())
                return usage - int(stat.get("inactive_file", 0))
        except (OSError, ValueError):
            continue
    return None


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def density_section(n: int, quick: bool, results: dict):
    """Idle per-session sandboxes: memory each, how many fit in 8 GiB, and one session's call
    latency while 1, 10 and 50 are live."""
    from runner import Runner

    levels = [1, 10] if quick else [1, 10, 50]
    ws = workspace("runner-bench-density-")
    rows, notes = [], []
    live: list = []
    lock = threading.Lock()

    def open_one(_):
        r = Runner(executor="docker", workspace=ws, preset="all")
        try:
            r.start()
        except BaseException:
            r.close()
            raise
        with lock:
            live.append(r)

    try:
        rss0 = _rss()
        open_one(0)
        target = live[0]
        for level in levels:
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(open_one, range(level - len(live))))
            time.sleep(3.0)  # let the new ones settle (agents idle, spares started, the engine quiet)
            lat = timed(lambda: target.call("bash", {"command": "echo hi"}), n * 5, warmup=3)
            rows.append((f"bash echo in one session, {level} live session(s)", lat, rows[0][1] if rows else None))
            results[f"call_with_{level}"] = statistics.median(lat)
        mems = [m for m in (memory_of(cid) for cid in _mine()) if m is not None]
        if mems:
            per = statistics.median(mems)
            results["sandbox_mem"] = per
            rss_per = max(0, _rss() - rss0) / len(live)
            results["controller_mem_per_session"] = rss_per
            fit = int(8 * GIB // (per + rss_per))
            results["fit_8gib"] = fit
            notes.append(f"memory per idle sandbox (container cgroup, agent + kept-ready shell, less inactive file "
                         f"cache): median {per / 2 ** 20:.1f} MiB over {len(mems)}; max {max(mems) / 2 ** 20:.1f} MiB")
            notes.append(f"controller memory per live session: {rss_per / 2 ** 20:.2f} MiB (RSS growth / sessions)")
            notes.append(f"idle per-session sandboxes in 8 GiB (memory only; each may grow to its own limit): ~{fit}")
        else:
            notes.append("memory per sandbox: no cgroup files readable here (cgroup layout unknown)")
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda r: r.close(), live))
        sweep()
    return [("density: idle per-session sandboxes", rows, notes)]


def _engine_cycle(client, kw: dict, host: dict) -> None:
    """One container the way the engine does it at best: create, start, wait, remove."""
    c = client.api.create_container(**kw, host_config=client.api.create_host_config(**host))
    client.api.start(c["Id"])
    client.api.wait(c["Id"])
    client.api.remove_container(c["Id"], force=True)


def _rate(fn, clients: int, seconds: float) -> tuple[float, int]:
    """Operations per second with `clients` threads each calling fn in a loop for `seconds`."""
    stop = time.monotonic() + seconds
    done = [0] * clients
    errors: list[str] = []

    def loop(i):
        while time.monotonic() < stop:
            try:
                fn()
            except Exception as e:  # counted out, reported
                errors.append(str(e)[:200])
                return
            done[i] += 1

    t0 = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(loop, range(clients)))
    took = time.monotonic() - t0
    if errors:
        print(f"  ! {len(errors)} error(s), first: {errors[0]}", flush=True)
    return sum(done) / took, sum(done)


def throughput_section(n: int, quick: bool, results: dict):
    """Per-call sandboxes per second (a fresh sandbox for each call) against the engine's own
    create+start+remove rate of a hardened container, in the same run, with 1 and 4 clients."""
    from executors.docker.engine import shared_client
    from runner import Runner

    seconds = 4.0 if quick else 10.0
    client = shared_client()
    kw = {"image": IMAGE, "command": ["true"], "user": "1000:1000", "network_disabled": True,
          "labels": {LABEL.split("=")[0]: "1", "runner.bench.pid": str(os.getpid())}}
    host = {"network_mode": "none", "cap_drop": ["ALL"], "security_opt": ["no-new-privileges:true"], "read_only": True,
            "pids_limit": 256, "mem_limit": "512m", "nano_cpus": 10 ** 9, "log_config": {"type": "none", "config": {}},
            "tmpfs": {"/tmp": "rw,nosuid,nodev,size=64m"}}
    ws = workspace("runner-bench-rate-")
    notes = []
    try:
        for clients in (1, 4):
            eng, k = _rate(lambda: _engine_cycle(client, kw, host), clients, seconds)
            results[f"engine_rate_{clients}"] = eng
            runners = [Runner(executor="docker", workspace=ws, preset="all", lifecycle="per-call", pool_size=2)
                       for _ in range(clients)]
            try:
                for r in runners:
                    r.start()
                it = iter(range(10 ** 9))
                lock = threading.Lock()

                def one(lock=lock, runners=runners, it=it, clients=clients):
                    with lock:
                        r = runners[next(it) % clients]
                    res = r.call("bash", {"command": "echo hi"})
                    if res.is_error:
                        raise RuntimeError(res.text)

                ours, m = _rate(one, clients, seconds)
            finally:
                for r in runners:
                    r.close()
            results[f"percall_rate_{clients}"] = ours
            notes.append(f"{clients} client(s): engine create+start+wait+remove {eng:.1f}/s ({k} in {seconds:g}s); "
                         f"runner per-call sandboxes (one bash call each, warm pool of 2 per client) {ours:.1f}/s "
                         f"({m}): {ours / eng:.2f}x the engine")
    finally:
        sweep()
    return [("throughput: per-call sandboxes per second against the engine's own rate", [], notes)]


def flat_memory_section(n: int, quick: bool, results: dict):
    """A flood of output through bash and `result` paging over it: the controller's RSS stays flat."""
    from runner import Runner

    size = 100 * 10 ** 6 if quick else 10 ** 9
    ws = workspace("runner-bench-flood-")
    notes = []
    try:
        with Runner(executor="docker", workspace=ws, preset="all") as r:
            r.call("bash", {"command": "true"})
            rss0 = _rss()
            peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            t = time.perf_counter()
            res = r.call("bash", {"command": f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}",
                                  "timeout": 600})
            took = time.perf_counter() - t
            rss1 = _rss()
            peak1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            call_id = res.meta.get("call_id") or res.meta.get("id")
            pages, pt = 0, time.perf_counter()
            if call_id:
                for offset in range(1, 20 * 2000, 2000):
                    page = r.call("result", {"call_id": call_id, "offset": offset, "limit": 2000})
                    pages += not page.is_error
            ptook = time.perf_counter() - pt
            rss2 = _rss()
        results["flood_mb_s"] = size / took / 1e6
        results["flood_rss_growth"] = max(rss1, rss2) - rss0
        notes.append(f"{size / 1e6:.0f} MB through bash in {took:.1f}s ({size / took / 1e6:.0f} MB/s); controller RSS "
                     f"{rss0 / 2 ** 20:.0f} -> {rss1 / 2 ** 20:.0f} MiB after the flood, {rss2 / 2 ** 20:.0f} MiB after "
                     f"{pages} `result` pages ({ptook / max(pages, 1) * 1000:.1f} ms each); peak RSS grew "
                     f"{(peak1 - peak0) / 2 ** 20:.0f} MiB; output kept {res.meta.get('output_chars', '?')} chars, "
                     f"truncated={res.meta.get('truncated')}")
    finally:
        sweep()
    return [("flat memory: a flood through bash, then `result` paging", [], notes)]


def docker_run_hardened() -> list[str]:
    return ["docker", "run", "--rm", "--label", LABEL, "--label", f"runner.bench.pid={os.getpid()}", *HARDENED, IMAGE]
