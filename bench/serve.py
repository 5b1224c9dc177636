"""`runner serve` under load for `make bench`: T tenants x S concurrent sessions x C calls, on
loopback only; calls/s, p50 and p99 latency, the server's peak RSS and 429s counted; then the
same with per-call sandboxes (fewer sessions and calls: each call starts a container).

    .venv/bin/python bench/serve.py [--tenants 10] [--sessions 5] [--calls 50] [--per-call-calls 10] [--per-call-sessions 1]
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICY = """\
extends: default
name: {name}
sandbox: {{lifecycle: {lifecycle}, pool_size: {pool}}}
limits: {{memory: 256m, pids: 128}}
"""


def _rss_kb(pid: int, field: str = "VmHWM") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


@contextlib.contextmanager
def serving(data: Path, *extra: str):
    """`runner serve` on a loopback port of its own choosing, with its data directory (and `extra`
    options): yields (the process, its URL), and stops it (SIGTERM: it removes its sandboxes) at the end."""
    proc = subprocess.Popen([sys.executable, "-m", "runner", "serve", "--port", "0", "--data", str(data), *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = ""
        while "listening on" not in line:
            line = proc.stderr.readline().decode()
            if not line:
                raise RuntimeError("runner serve did not start")
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        yield proc, line.split("listening on ")[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()


def load(tenants: int, sessions: int, calls: int, lifecycle: str) -> dict:
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-serve-"))
    data = tmp / "data"
    pol = tmp / "bench.yaml"
    pol.write_text(POLICY.format(name="bench", lifecycle=lifecycle, pool=0 if lifecycle == "per-session" else 1))
    runner = [sys.executable, "-m", "runner"]
    keys = [subprocess.run(runner + ["tenants", "add", f"t{i}", "--policy", str(pol), "--data", str(data),
                                     "--max-sessions", str(sessions), "--calls-per-minute", "100000"],
                           capture_output=True, text=True, check=True).stdout.strip() for i in range(tenants)]
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
        proc, url = cleanup.enter_context(serving(data))
        lat: list[float] = []
        codes: dict[int, int] = {}
        lock = threading.Lock()
        rss_idle = _rss_kb(proc.pid, "VmRSS")

        def agent(key: str) -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as c:
                sid = c.post("/v1/sessions", json={"sandbox": "session" if lifecycle == "per-session"
                                                   else "per-call"}).json()["id"]
                c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}})  # the sandbox starts
                for _ in range(calls):
                    t = time.perf_counter()
                    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}})
                    dt = time.perf_counter() - t
                    with lock:
                        codes[r.status_code] = codes.get(r.status_code, 0) + 1
                        if r.status_code == 200:
                            lat.append(dt)
                c.delete(f"/v1/sessions/{sid}")

        threads = [threading.Thread(target=agent, args=(k,)) for k in keys for _ in range(sessions)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        return {"lifecycle": lifecycle, "calls": sum(codes.values()), "wall_s": wall,
                "calls_per_s": sum(codes.values()) / wall, "p50_ms": statistics.median(lat) * 1000,
                "p99_ms": _pct(lat, 0.99) * 1000, "rss_idle_mb": rss_idle / 1024,
                "rss_peak_mb": _rss_kb(proc.pid) / 1024, "429s": codes.get(429, 0),
                "errors": {k: v for k, v in codes.items() if k not in (200, 429)}}


def serve_section(tenants: int = 10, sessions: int = 5, calls: int = 50, per_call_calls: int = 10,
                  per_call_sessions: int = 1) -> None:
    """Per-call sandboxes start a container for every call (and keep one warm per session): on 2
    cores, 50 sessions doing that at once starve the machine, so that half runs fewer sessions."""
    print(f"\n## runner serve: {tenants} tenants, `ls` calls over loopback\n")
    print("| sandboxes | sessions at once | calls | wall s | calls/s | p50 ms | p99 ms | server RSS idle / peak MB | 429s | other errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for lifecycle, n, per in (("per-session", calls, sessions), ("per-call", per_call_calls, per_call_sessions)):
        r = load(tenants, per, n, lifecycle)
        print(f"| {lifecycle} ({n} calls each) | {tenants * per} | {r['calls']} | {r['wall_s']:.1f} | {r['calls_per_s']:.1f} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['rss_idle_mb']:.0f} / {r['rss_peak_mb']:.0f} | {r['429s']} | "
              f"{r['errors'] or '-'} |", flush=True)


def overhead(n: int = 200) -> dict:
    """What serve adds to a warm session's call: `bash true` through POST /v1/sessions/ID/calls
    (one keep-alive loopback connection) against the same call on a Runner in this process, with
    the same policy and one sandbox for the session, interleaved call by call so that both see
    the same load; medians and p99 in ms."""
    import httpx

    from runner.controller.core import Runner

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-overhead-"))
    data, ws = tmp / "data", tmp / "ws"
    ws.mkdir()
    pol = tmp / "bench.yaml"
    pol.write_text(POLICY.format(name="bench", lifecycle="per-session", pool=0))
    key = subprocess.run([sys.executable, "-m", "runner", "tenants", "add", "t", "--policy", str(pol), "--data",
                          str(data), "--calls-per-minute", "100000"],
                         capture_output=True, text=True, check=True).stdout.strip()
    call = {"tool": "bash", "args": {"command": "true"}}
    local, served = [], []
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
        _proc, url = cleanup.enter_context(serving(data))
        c = cleanup.enter_context(httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300))
        r = cleanup.enter_context(Runner(workspace=ws, policy=str(pol)))
        sid = c.post("/v1/sessions", json={}).json()["id"]
        cleanup.callback(lambda: c.delete(f"/v1/sessions/{sid}"))
        for _ in range(5):  # both sandboxes started and warm
            assert not r.call(call["tool"], call["args"]).is_error
            assert c.post(f"/v1/sessions/{sid}/calls", json=call).status_code == 200
        for _ in range(n):
            t = time.perf_counter()
            r.call(call["tool"], call["args"])
            local.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = c.post(f"/v1/sessions/{sid}/calls", json=call)
            served.append(time.perf_counter() - t)
            assert got.status_code == 200 and not got.json()["is_error"], got.text
    ms = lambda xs, q=None: (statistics.median(xs) if q is None else _pct(xs, q)) * 1000  # noqa: E731
    return {"n": n, "local_p50_ms": ms(local), "serve_p50_ms": ms(served), "local_p99_ms": ms(local, 0.99),
            "serve_p99_ms": ms(served, 0.99), "added_p50_ms": ms(served) - ms(local)}


def overhead_section(n: int = 200) -> None:
    r = overhead(n)
    print(f"\n## runner serve: a warm session's call over loopback against the same call in-process ({n} `bash true` "
          "each, interleaved)\n")
    print("| | p50 ms | p99 ms |\n|---|---|---|")
    print(f"| Runner.call in-process | {r['local_p50_ms']:.2f} | {r['local_p99_ms']:.2f} |")
    print(f"| POST /v1/sessions/ID/calls | {r['serve_p50_ms']:.2f} | {r['serve_p99_ms']:.2f} |")
    print(f"| added by serve (p50) | {r['added_p50_ms']:.2f} | |  (goal: at most 2 ms)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--per-call-calls", type=int, default=10)
    ap.add_argument("--per-call-sessions", type=int, default=1, help="sessions per tenant in the per-call half")
    ap.add_argument("--overhead-only", action="store_true", help="only the warm call's added cost")
    a = ap.parse_args()
    overhead_section()
    if not a.overhead_only:
        serve_section(a.tenants, a.sessions, a.calls, a.per_call_calls, a.per_call_sessions)


if __name__ == "__main__":
    main()
