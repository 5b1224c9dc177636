"""Peers for `make bench`, side by side: SWE-ReX and llm-sandbox, run from bench/.venv (made by
`make bench-peers`; never a dependency of runner) against the locally built image, never pulling.

Each peer runs in a child process of bench/.venv's Python (bench/peer_child.py) that prints one
JSON object of figures; a peer that is not installed is reported as such, not measured.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.run import IMAGE, ROOT

VENV_PY = ROOT / "bench" / ".venv" / "bin" / "python"
PEER_IMAGE = "runner-bench/swerex:latest"  # runner/base plus swe-rex, built by `make bench-peers`


def peers_section(n: int, results: dict):
    rows, notes = [], []
    if not VENV_PY.exists():
        return [("peers", [], ["not installed: `make bench-peers` makes bench/.venv with SWE-ReX and llm-sandbox "
                               "(raw `docker run` and `docker exec` are in the sections above)"])]
    for peer, image in (("llm-sandbox", IMAGE), ("swe-rex", PEER_IMAGE)):
        proc = subprocess.run([str(VENV_PY), str(ROOT / "bench" / "peer_child.py"), peer, image, str(n)],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "PYTHONPATH": ""})
        try:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            notes.append(f"{peer}: did not run ({(proc.stderr.strip().splitlines() or ['no output'])[-1][:300]})")
            continue
        if "error" in got:
            notes.append(f"{peer}: {got['error'][:300]}")
            continue
        for key, xs in got.items():
            base = None
            if key == "call" and "fork" in results:
                base = [results["fork"]]
            rows.append((f"{peer}: {key}", xs, base))
            if key in ("call", "start"):
                results[f"peer_{peer}_{key}"] = sorted(xs)[len(xs) // 2]
    return [("peers, side by side (same machine, same run)", rows, notes)]


if __name__ == "__main__":
    print(peers_section(int(sys.argv[1]) if len(sys.argv) > 1 else 5, {}))
