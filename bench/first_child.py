"""Run by bench/first.py in a fresh process: time `from runner import Runner`, Runner() with its
start, the first call and close(), and print them as one JSON line (seconds)."""
from __future__ import annotations

import json
import sys
import time

t0 = time.perf_counter()
from runner import Runner  # noqa: E402  (what is timed)

t1 = time.perf_counter()
r = Runner(workspace=sys.argv[1]).start()
t2 = time.perf_counter()
res = r.call("bash", {"command": sys.argv[2]})
t3 = time.perf_counter()
r.close()
t4 = time.perf_counter()
if res.is_error:
    raise SystemExit(f"the first call failed: {res.text}")
print(json.dumps({"import": t1 - t0, "start": t2 - t1, "call": t3 - t2, "close": t4 - t3}))
