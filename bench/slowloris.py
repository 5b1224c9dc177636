"""`runner serve` under an unauthenticated flood (issue 43): a tenant's latency on fresh
connections (p50, p99) with no flood and while 1000 half-open connections (request heads that
never end, reopened as the server closes them) are held; then the server's peak RSS while one
tenant downloads a 64 MiB sparse file 16 times at once (downloads are sent in bounded chunks).
Loopback only; the server is stopped and its sandboxes removed at the end.

    .venv/bin/python bench/slowloris.py [--half-open 1000] [--requests 200]
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.serve import _pct, _rss_kb, serving  # noqa: E402

POLICY = "extends: default\nname: loris\nsandbox: {lifecycle: per-session, pool_size: 0}\nlimits: {memory: 256m}\n"
HEAD = b"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


class Flood:
    """n half-open connections to host:port, each reopened when the server closes it."""

    def __init__(self, host: str, port: int, n: int) -> None:
        self.addr, self.n = (host, port), n
        self.socks: list[socket.socket] = []
        self.reopened = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _open(self) -> socket.socket | None:
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(self.addr)
            s.sendall(HEAD)
            s.setblocking(False)
            return s
        except OSError:
            s.close()
            return None

    def start(self) -> None:
        self.socks = [s for s in (self._open() for _ in range(self.n)) if s is not None]
        self.thread.start()

    def _hold(self) -> None:
        while not self.stop.wait(0.5):
            for i, s in enumerate(self.socks):
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    new = self._open()
                    if new is not None:
                        self.socks[i] = new
                        self.reopened += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def latencies(url: str, key: str, n: int) -> tuple[list[float], int]:
    import httpx

    took, failed = [], 0
    for _ in range(n):
        t = time.perf_counter()
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
                if c.get("/v1/sessions").status_code != 200:
                    failed += 1
        except httpx.HTTPError:
            failed += 1
        took.append(time.perf_counter() - t)
    return took, failed


def downloads(url: str, key: str, parallel: int, pid: int) -> dict:
    import httpx

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "truncate -s 64M big"}})
        before = _rss_kb(pid, "VmRSS")

        def one(_):
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as d:
                with d.stream("GET", f"/v1/sessions/{sid}/files/big") as r:
                    return r.status_code, sum(len(b) for b in r.iter_bytes())

        with ThreadPoolExecutor(parallel) as pool:
            got = list(pool.map(one, range(parallel)))
        peak = _rss_kb(pid, "VmHWM")
        c.delete(f"/v1/sessions/{sid}")
    return {"before_mb": before / 1024, "peak_mb": peak / 1024, "ok": sum(code == 200 for code, _ in got),
            "bytes": sum(n for _, n in got)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half-open", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--downloads", type=int, default=16)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="runner-bench-loris-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        (Path(tmp) / "loris.yaml").write_text(POLICY)
        key = subprocess.run([sys.executable, "-m", "runner", "tenants", "add", "loris", "--policy",
                              str(Path(tmp) / "loris.yaml"), "--data", str(data)],
                             capture_output=True, text=True, check=True).stdout.strip()
        with serving(data, "--max-transfers-per-tenant", str(a.downloads)) as (proc, url):
            host, port = url.split("//")[1].split(":")
            base, base_failed = latencies(url, key, a.requests)
            flood = Flood(host, int(port), a.half_open)
            flood.start()
            try:
                held, held_failed = latencies(url, key, a.requests)
            finally:
                flood.close()
            print(f"tenant GET /v1/sessions on fresh connections, {a.requests} each (loadavg "
                  f"{open('/proc/loadavg').read().split()[0]}):")
            print(f"  no flood:            p50 {_pct(base, .5) * 1e3:7.1f} ms  p99 {_pct(base, .99) * 1e3:7.1f} ms  "
                  f"unanswered {base_failed}")
            print(f"  {a.half_open} half-open held: p50 {_pct(held, .5) * 1e3:7.1f} ms  p99 {_pct(held, .99) * 1e3:7.1f} ms  "
                  f"unanswered {held_failed}  (p99 ratio {_pct(held, .99) / _pct(base, .99):.2f}x; "
                  f"{flood.reopened} half-open connections closed by the server and reopened)")
            d = downloads(url, key, a.downloads, proc.pid)
            print(f"{a.downloads} parallel downloads of a 64 MiB sparse file: {d['ok']} answered, "
                  f"{d['bytes'] / 2 ** 20:.0f} MiB sent; server RSS {d['before_mb']:.0f} MB before, peak {d['peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
