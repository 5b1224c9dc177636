"""Where a bash call's time goes in the controller, for `make bench`: each step of the call path
timed in place (a wrapper around it), back to back and 50 ms apart, on docker.

The wrappers cost a few microseconds each, so the whole call is a little slower than in the
tools section; the steps' shares are what this is for. A step that a refactor renamed shows
as the section failing, not as a wrong figure."""
from __future__ import annotations

import statistics
import time

from bench.run import workspace


def _wrap(owner, name: str, label: str, now: list) -> tuple:
    """Replace owner.name by a timer that adds its time to now[0][label]; (owner, name, original)."""
    original = getattr(owner, name)

    def timer(*a, **k):
        t = time.perf_counter_ns()
        try:
            return original(*a, **k)
        finally:
            if now[0] is not None:
                now[0][label] = now[0].get(label, 0) + time.perf_counter_ns() - t

    setattr(owner, name, timer)
    return owner, name, original


def _wrap_spare_wait(sandbox_cls, label: str, now: list) -> tuple:
    """The same for Sandbox._next only where a call waits for the agent's next spare (spare=True):
    back to back, a call that finds none held waits for the sandbox to fork and lend one."""
    original = sandbox_cls._next

    def timer(self, deadline, spare=False):
        if not spare:
            return original(self, deadline, spare)
        t = time.perf_counter_ns()
        try:
            return original(self, deadline, spare)
        finally:
            if now[0] is not None:
                now[0][label] = now[0].get(label, 0) + time.perf_counter_ns() - t

    sandbox_cls._next = timer
    return sandbox_cls, "_next", original


def _calls(r, n: int, gap: float, now: list) -> list[dict]:
    for _ in range(30):
        r.call("bash", {"command": "echo hi"})
    out = []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        now[0] = {}
        t = time.perf_counter_ns()
        r.call("bash", {"command": "echo hi"})
        now[0]["whole call"] = time.perf_counter_ns() - t
        out.append(now[0])
        now[0] = None
    return out


WAIT = "  of which waiting for the agent's next spare"  # (inside "sandbox call", outside the lent shell's)


def steps_section(n: int):
    from runner import Runner
    from runner.controller import guards, lent_shells as lent, sandbox
    from runner.reporting.audit import AuditLog

    now: list = [None]
    made = [_wrap(guards, s.__name__, f"guard {s.__name__}", now) for s in guards.STEPS]
    steps_before = guards.STEPS
    guards.STEPS = tuple(getattr(guards, s.__name__) for s in steps_before)
    made += [_wrap(sandbox.Sandbox, "call", "sandbox call (to the result)", now),
             _wrap(lent, "run", "  of which the lent shell's (command in, output and status out)", now),
             _wrap_spare_wait(sandbox.Sandbox, WAIT, now),
             _wrap(Runner, "_guards", "guards' context", now),
             _wrap(Runner, "_compose", "composing the result", now),
             _wrap(AuditLog, "record_result", "audit record", now)]
    try:
        with Runner(executor="docker", workspace=workspace("runner-bench-steps-"), preset="all") as r:
            made.append(_wrap(r.store, "sink", "output sink", now))
            b2b = _calls(r, n * 100, 0.0, now)
            paced = _calls(r, n * 15, 0.05, now)
    finally:
        for owner, name, original in reversed(made):
            setattr(owner, name, original)
        guards.STEPS = steps_before

    def med(calls: list[dict], label: str) -> float:
        return statistics.median(c.get(label, 0) for c in calls) / 1000

    def rest(c: dict) -> int:  # the controller's own work that no step above holds
        return c["whole call"] - sum(v for k, v in c.items() if k != "whole call" and not k.startswith("  "))

    first = ["whole call", "sandbox call (to the result)", "  of which the lent shell's (command in, output and status out)",
             WAIT]
    labels = first + sorted({k for c in b2b for k in c} - set(first), key=lambda k: -med(paced, k))
    notes = [f"{k}: {med(b2b, k):.0f} us back to back ({len(b2b)} calls), {med(paced, k):.0f} us 50 ms apart "
             f"({len(paced)})" for k in labels]

    def waited(calls: list[dict]) -> str:
        waits = [c[WAIT] / 1000 for c in calls if c.get(WAIT)]
        return f"{len(waits) * 100 / len(calls):.0f}% (median wait {statistics.median(waits) if waits else 0:.0f} us)"

    notes.append(f"calls that found no spare held and waited for the agent's next: {waited(b2b)} back to back, "
                 f"{waited(paced)} 50 ms apart. Back to back a call waits while the sandbox forks and lends the "
                 "next spare: there the sandbox's CPU per call, not the controller's, sets the pace")
    notes.append(f"the rest of the controller (redaction, meta, the lock, the route): "
                 f"{statistics.median(map(rest, b2b)) / 1000:.0f} us back to back, "
                 f"{statistics.median(map(rest, paced)) / 1000:.0f} us 50 ms apart")
    return [("where a bash call's time goes in the controller (medians in us, each step timed in place)", [], notes)]
