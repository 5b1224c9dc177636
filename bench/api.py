"""The Python API's forms, for `make bench`: what the async API (AsyncRunner) adds to a call over
the sync Runner it runs on, the same calls in turns on one engine, and how long cancelling a call
takes until its processes are gone (Runner.cancel, which Ctrl-C and asyncio cancellation use)."""
from __future__ import annotations

import asyncio
import threading
import time

from bench.run import timed_together, workspace


def api_section(n: int) -> list[tuple]:
    from runner import AsyncRunner, Runner

    ws_sync, ws_async = workspace("runner-bench-api-"), workspace("runner-bench-api-async-")
    loop = asyncio.new_event_loop()
    rows, notes = [], []
    with Runner(executor="docker", workspace=ws_sync) as r:
        ar = AsyncRunner(executor="docker", workspace=ws_async)
        loop.run_until_complete(ar.start())
        try:
            for tool, args, what in (("echo", {"text": "hi"}, "echo tool"), ("bash", {"command": "echo hi"},
                                                                              "bash `echo hi`")):
                sync, asyn = timed_together([lambda t=tool, a=args: r.call(t, a),
                                             lambda t=tool, a=args: loop.run_until_complete(ar.call(t, a))],
                                            max(n, 20) * 5, warmup=5, turn=5)
                rows.append((f"Runner(docker) {what}, one call at a time", sync, None))
                rows.append((f"AsyncRunner(docker) {what} / the sync call", asyn, sync))
            cancels = []
            for _ in range(max(3, n // 4)):
                box = {}
                t = threading.Thread(target=lambda b=box: b.update(res=r.call(
                    "bash", {"command": "echo up; sleep 600"}, on_output=lambda _t, b=b: b.setdefault("up", 1))))
                t.start()
                while "up" not in box:
                    time.sleep(0.005)
                t0 = time.perf_counter()
                r.cancel()  # returns once the call's sandbox (and the sleep) is gone
                cancels.append(time.perf_counter() - t0)
                t.join()
                r.call("echo", {"text": "next"})  # a fresh sandbox for the next round
            rows.append(("Runner(docker) cancel() of a `sleep`, until its processes are gone", cancels,
                         False))
        finally:
            loop.run_until_complete(ar.close())
            loop.close()
    notes.append("the async call runs the sync one on the session's own thread: the ratio is the thread hand-off "
                 "and the event loop's wake-up, per call")
    return [("the Python API: async over sync, and cancelling a call", rows, notes)]
