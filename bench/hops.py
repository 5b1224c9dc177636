"""Where a bash call waits for a CPU, against a local fork: a kernel trace of both (root only).

    .venv/bin/python bench/hops.py [--rounds 10]

Rounds of 100 forks (`sh -c 'echo hi'`) then 100 calls (a Runner's bash `echo hi`, docker), as
`make bench`'s turns take them, with the scheduler's `sched_wakeup`, `sched_wakeup_new`,
`sched_switch` and `sched_process_fork` events on (tracefs) and a marker around each fork and
call. For each process of a call (the controller, the agent, the spare that runs the command,
the zygote that forks the next) it sums, per call, the time from each wake-up to its running,
and sorts the wake-ups by what the CPU they were put on was doing then: idle (on a VM, a halted
vCPU is woken by an interrupt: a VM exit), running the waker itself (a sync wake-up, as a pipe's
is: the waker runs on until it sleeps), or running another of them. DESIGN.md has what it showed.
Not part of `make bench`: it needs root and changes the kernel's tracing state for its run (set
back at the end). Never part of the test suite.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRACING = Path("/sys/kernel/tracing")
EVENTS = ("sched_wakeup", "sched_wakeup_new", "sched_switch", "sched_process_fork")
LINE = re.compile(r"^\s*.+?-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")
FIELD = re.compile(r"(\w+)=(\S+)")
ROLES = {"C": "controller", "A": "agent", "S": "spare", "Z": "zygote", "K": "fork's child"}


def _write(name: str, value: str) -> None:
    (TRACING / name).write_text(value)


def trace(rounds: int) -> tuple[str, dict]:
    """The trace's text and the pids {C, A, Z} of the run."""
    from bench.run import run
    from runner import Runner

    fork = ["sh", "-c", "echo hi"]
    with Runner(executor="docker", workspace=tempfile.mkdtemp(prefix="runner-bench-hops-"), preset="all") as r:
        for _ in range(300):
            r.call("bash", {"command": "echo hi"})
        from executors.docker.engine import shared_client

        cid = r.session.acquire().proc.container.id
        top = shared_client().api.top(cid, ps_args="-o pid,ppid,args")
        procs = [dict(zip(top["Titles"], p, strict=True)) for p in top["Processes"]]
        python = {p["PID"] for p in procs if p["COMMAND"].startswith("python")}
        zygote = next(p for p in procs if p["COMMAND"].startswith("/usr/bin/bash") and p["PPID"] in python)
        pids = {"C": os.getpid(), "A": int(zygote["PPID"]), "Z": int(zygote["PID"])}
        size = (TRACING / "buffer_size_kb").read_text().split()[0]
        _write("tracing_on", "0")
        _write("trace", "")
        _write("buffer_size_kb", "65536")
        try:
            for e in EVENTS:
                _write(f"events/sched/{e}/enable", "1")
            with open(TRACING / "trace_marker", "w", buffering=1) as mark:
                _write("tracing_on", "1")
                for rnd in range(rounds):
                    for kind, fn in (("FORK", lambda: run(fork)), ("CALL", lambda: r.call("bash", {"command": "echo hi"}))):
                        for i in range(100):
                            mark.write(f"{kind} {rnd} {i} S\n")
                            fn()
                            mark.write(f"{kind} {rnd} {i} E\n")
                _write("tracing_on", "0")
            text = (TRACING / "trace").read_text()
        finally:
            _write("tracing_on", "0")
            for e in EVENTS:
                _write(f"events/sched/{e}/enable", "0")
            _write("trace", "")
            _write("buffer_size_kb", size)
    return text, pids


def windows(text: str, pids: dict) -> list[dict]:
    """One dict per fork or call: kind, i (its place in its turn), t (s), wait and wakes by role,
    wait and wakes by (role, what the CPU it was woken onto ran)."""
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            pid, cpu, ts, ev, rest = m.groups()
            events.append((float(ts), int(cpu), int(pid), ev, rest))
    events.sort()
    spares, kids = set(), set()

    def role(pid: int) -> str | None:
        for r, p in pids.items():
            if p == pid:
                return r
        return "S" if pid in spares else "K" if pid in kids else None

    out, cur, pending, running = [], None, {}, {}
    for ts, cpu, pid, ev, rest in events:
        if ev == "tracing_mark_write":
            kind, _, i, edge = rest.split()
            if edge == "S":
                cur = {"kind": kind, "i": int(i), "t0": ts, "wait": collections.Counter(),
                       "wakes": collections.Counter(), "onto": collections.Counter(), "onto_n": collections.Counter()}
            elif cur is not None:
                cur["t"] = ts - cur.pop("t0")
                out.append(cur)
                cur = None
            continue
        f = dict(FIELD.findall(rest.replace(" ==> ", " ")))
        if ev == "sched_process_fork":
            parent, child = int(f["pid"]), int(f["child_pid"])
            if parent == pids["Z"]:
                spares.add(child)
            elif parent == pids["C"]:
                kids.add(child)
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            woken, target = int(f["pid"]), int(f["target_cpu"])
            there = running.get(target)
            what = "idle" if there == 0 else "the waker" if there == pid else (ROLES.get(role(there) or "", "other"))
            pending[woken] = (ts, what)
        elif ev == "sched_switch":
            nxt = int(f["next_pid"])
            running[cpu] = nxt
            if nxt in pending:
                t, what = pending.pop(nxt)
                r = role(nxt)
                if cur is not None and r is not None:
                    cur["wait"][r] += (ts - t) * 1e6
                    cur["wakes"][r] += 1
                    cur["onto"][(r, what)] += (ts - t) * 1e6
                    cur["onto_n"][(r, what)] += 1
    return out


def report(ws: list[dict]) -> None:
    groups = [("fork", [w for w in ws if w["kind"] == "FORK"], "CK")]
    groups += [(f"call {lo}-{hi - 1} of its turn", [w for w in ws if w["kind"] == "CALL" and lo <= w["i"] < hi], "CASZ")
               for lo, hi in ((0, 20), (20, 80), (80, 100))]
    for name, sel, roles in groups:
        if not sel:
            continue
        print(f"{name}: {len(sel)}, median {statistics.median(w['t'] for w in sel) * 1e3:.3f} ms; waits for a CPU "
              "a call (us, wake-ups): " + ", ".join(
                  f"{ROLES[r]} {statistics.mean(w['wait'][r] for w in sel):.0f} "
                  f"({statistics.mean(w['wakes'][r] for w in sel):.1f})" for r in roles))
        onto, n = collections.Counter(), collections.Counter()
        for w in sel:
            onto.update(w["onto"])
            n.update(w["onto_n"])
        rows = sorted(onto, key=lambda k: -onto[k])
        print("  by the CPU it was woken onto: " + "; ".join(
            f"{ROLES[r]} onto {what} {n[(r, what)] / len(sel):.2f}x {onto[(r, what)] / n[(r, what)]:.0f} us"
            for r, what in rows if onto[(r, what)] / len(sel) >= 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds of 100 forks then 100 calls")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/hops.py: run it as root (it turns the kernel's scheduler events on, in tracefs)")
    mounted = False
    if not (TRACING / "trace").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACING)], check=True)
        mounted = True
    try:
        text, pids = trace(args.rounds)
    finally:
        if mounted:
            subprocess.run(["umount", str(TRACING)], check=False)
    report(windows(text, pids))


if __name__ == "__main__":
    main()
