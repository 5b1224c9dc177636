"""Tool-call figures for `make bench`: the full Runner against a local fork and `docker exec`."""
from __future__ import annotations

import resource
import statistics
import subprocess
import time

from bench.run import IMAGE, LABEL, run, timed, timed_together, workspace


def _cpu_here(since: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's) since `since`."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() - since[0], kids.ru_utime + kids.ru_stime - since[1]


def _model(container):
    """docker-py's model of a sandbox's container (the sandbox holds its id only: its path is wire.py)."""
    from executors.docker.engine import shared_client

    return shared_client().containers.get(container.id)


def _cpu_of(container) -> float:
    """CPU seconds the container's processes have used, as its cgroup counts them (0 for None)."""
    if container is None:
        return 0.0
    return container.stats(stream=False, one_shot=True)["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


TURN = 100  # calls, then forks, at a time in the goal's back-to-back ratio


def _ends(xs: list[float], k: int = 20) -> tuple[float, float]:
    """Medians of the first k and the last k of each turn (xs: turns of TURN, in order). Calls
    early in a turn, just after the fork's, run before the kernel has spread the sandbox's
    processes over both CPUs again (DESIGN.md)."""
    return (statistics.median(x for i, x in enumerate(xs) if i % TURN < k),
            statistics.median(x for i, x in enumerate(xs) if i % TURN >= TURN - k))


def _through_the_agent(ws, calls: int, rows_call: list, results: dict) -> None:
    """The same bash calls with no shell lent to the controller (runner/controller/lent_shells.py off: each call
    goes through the agent, four wake-ups where a lent shell's has two), in turns with the fork
    and paced as above: what lending gains, measured in the same minutes."""
    from runner import Runner
    from runner.controller import lent_shells as lent

    real = lent.nowait
    lent.nowait = lambda: False  # (only sandboxes started from here on)
    try:
        with Runner(executor="docker", workspace=ws, preset="all") as r:
            fork_turns, bash_turns = timed_together([lambda: run(["sh", "-c", "echo hi"]),
                                                     lambda: r.call("bash", {"command": "echo hi"})],
                                                    1000, warmup=3, turn=TURN)
            fork_paced, paced_bash = timed_together([lambda: run(["sh", "-c", "echo hi"]),
                                                     lambda: r.call("bash", {"command": "echo hi"})],
                                                    calls, warmup=3, turn=10, gap=0.05)
    finally:
        lent.nowait = real
    rows_call.append(("Runner(docker) bash echo in turns, through the agent (lent shells off)", bash_turns, fork_turns))
    rows_call.append(("Runner(docker) bash echo 50 ms apart, through the agent (lent shells off)", paced_bash, fork_paced))
    results["agent_turns_ratio"] = statistics.median(bash_turns) / statistics.median(fork_turns)
    results["agent_paced_ratio"] = statistics.median(paced_bash) / statistics.median(fork_paced)


def tools_section(n: int, results: dict):
    from runner import Runner

    ws = workspace("runner-bench-")
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(200)))
    calls = n * 10
    rows_call, rows_start, rows_rate = [], [], []

    used = _cpu_here()
    fork = timed(lambda: run(["sh", "-c", "echo hi"]), calls)
    results["cpu_fork_parent"], results["cpu_fork_child"] = (x / (calls + 1) for x in _cpu_here(used))
    rows_call.append(("local fork+exec `sh -c 'echo hi'`", fork, None))
    results["fork"] = statistics.median(fork)
    bash_fork = timed(lambda: run(["bash", "-c", "echo hi"]), calls)
    rows_call.append(("local fork+exec `bash -c 'echo hi'`", bash_fork, fork))
    cat_fork = timed(lambda: run(["cat", str(ws / "a.txt")]), calls)
    rows_call.append(("local fork+exec `cat a.txt` (200 lines)", cat_fork, fork))
    cid = subprocess.run(["docker", "run", "-d", "--rm", "--label", LABEL, "--network", "none", IMAGE, "sleep", "600"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        dexec = timed(lambda: run(["docker", "exec", cid, "sh", "-c", "echo hi"]), n * 2)
    finally:
        run(["docker", "rm", "-f", cid])
    rows_call.append(("raw `docker exec CID sh -c 'echo hi'`", dexec, fork))
    inside = _fork_in_container(calls)  # the floor for bash in a sandbox: forks cost more in there
    rows_call.append(("`bash -c 'echo hi'` forked inside a hardened container", inside, bash_fork))
    for executor in ("local", "docker"):
        with Runner(executor=executor, workspace=ws, preset="all") as r:
            echo = timed(lambda: r.call("echo", {"text": "hi"}), calls, warmup=3)
            box = _model(r.session.acquire().proc.container) if executor == "docker" else None
            used, box_used = _cpu_here(), _cpu_of(box)
            bash = timed(lambda: r.call("bash", {"command": "echo hi"}), calls, warmup=3)
            if box is not None:  # the work of a call, in every process: a paced call pays for all of it
                results["cpu_call_controller"] = _cpu_here(used)[0] / (calls + 3)
                results["cpu_call_sandbox"] = (_cpu_of(box) - box_used) / (calls + 3)
            if executor == "docker":  # the goal's ratio: 1000 calls and 1000 forks in turns of 100, back
                # to back within each, so both see the same minutes of this shared machine (either
                # alone moves by a tenth between runs here)
                fork_turns, bash_turns = timed_together([lambda: run(["sh", "-c", "echo hi"]),
                                                         lambda: r.call("bash", {"command": "echo hi"})],
                                                        1000, warmup=3, turn=TURN)
                results["bash_turn_ends"], results["fork_turn_ends"] = _ends(bash_turns), _ends(fork_turns)
            read = timed(lambda: r.call("read", {"path": "a.txt"}), calls, warmup=3)
            # 50 ms before each call, taking turns with the same fork at the same pace: after a
            # pause every process wakes on a cold CPU (a fork alone goes from ~0.7 to ~1.4 ms
            # here), so that fork is their floor, measured in the same minutes
            fork_paced, paced_bash = timed_together([lambda: run(["sh", "-c", "echo hi"]),
                                                     lambda: r.call("bash", {"command": "echo hi"})],
                                                    calls, warmup=3, turn=10, gap=0.05)
        rows_call.append((f"Runner({executor}, per-session) echo tool: the round trip", echo, None))
        rows_call.append((f"Runner({executor}, per-session) bash echo (vs bash fork)", bash, bash_fork))
        rows_call.append((f"Runner({executor}, per-session) bash echo (vs sh fork)", bash, fork))
        rows_call.append(("local fork+exec `sh -c 'echo hi'`, 50 ms between, in turns with the next", fork_paced, fork))
        rows_call.append((f"Runner({executor}) bash echo, 50 ms between (vs sh fork, same pace)", paced_bash, fork_paced))
        if executor == "docker":
            rows_call.append(("Runner(docker, per-session) bash echo (vs its fork in there)", bash, inside))
            rows_call.append(("Runner(docker) bash echo in turns of 100 with the sh fork (vs the fork's turns)",
                              bash_turns, fork_turns))
            results["bash_call"], results["fork_turns"] = statistics.median(bash_turns), statistics.median(fork_turns)
            results["bash_call_paced"], results["fork_paced"] = statistics.median(paced_bash), statistics.median(fork_paced)
        rows_call.append((f"Runner({executor}, per-session) read 200 lines (vs cat fork)", read, cat_fork))
    _through_the_agent(ws, calls, rows_call, results)

    def start_only(pool_size):
        r = Runner(executor="docker", workspace=ws, preset="all", pool_size=pool_size)
        t = time.perf_counter()
        r.start()
        took = time.perf_counter() - t
        r.close()
        return took

    rows_start.append(("Runner(docker).start(), no pool (close not timed)", [start_only(0) for _ in range(n)], None))
    from runner.controller.pool import SandboxPool

    r = Runner(executor="docker", workspace=ws, preset="all")

    def cold_one():
        sb = r.session.make_sandbox()
        t = time.perf_counter()
        sb.start()
        took = time.perf_counter() - t
        sb.close()
        return took

    cold_one()
    cold = [cold_one() for _ in range(n)]
    rows_start.append(("sandbox ready for calls, made on demand (cold)", cold, None))
    results["cold_start"] = statistics.median(cold)
    pool = SandboxPool(r.session.make_sandbox, size=1)

    def warm_get():
        while pool.ready == 0:
            time.sleep(0.01)
        t = time.perf_counter()
        sb = pool.get()
        took = time.perf_counter() - t
        sb.close()
        return took

    warm = [warm_get() for _ in range(n)]
    rows_start.append(("sandbox ready, taken from a warm pool", warm, cold))
    results["warm_get"] = statistics.median(warm)
    pool.close()
    r.close()

    for size in (0, 2):
        with Runner(executor="docker", workspace=ws, preset="all", lifecycle="per-call", pool_size=size) as rc:
            t = timed(lambda: rc.call("bash", {"command": "echo hi"}), n)
        rows_rate.append((f"per-call lifecycle, pool {size}: one call (s/call → {1 / (sum(t) / len(t)):.1f} calls/s)", t, None))
    return [("tool calls: the full Runner against a local fork and docker exec", rows_call, []),
            ("sandbox start: with and without the warm pool", rows_start, []),
            ("per-call lifecycle: one call, each in a fresh sandbox", rows_rate, [])]


_FORK_LOOP = """
import subprocess, sys, time
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    subprocess.run(["bash", "-c", "echo hi"], stdout=subprocess.PIPE)
    print(time.perf_counter() - t)
"""


def _fork_in_container(n: int) -> list[float]:
    """Fork+exec of bash timed by python3 inside a container hardened like a sandbox."""
    out = subprocess.run(["docker", "run", "--rm", "--label", LABEL, "--network", "none", "--cap-drop", "ALL",
                          "--security-opt", "no-new-privileges", "--read-only", "--cpus", "1", "--pids-limit", "256",
                          IMAGE, "python3", "-c", _FORK_LOOP, str(n + 3)],
                         capture_output=True, text=True, check=True).stdout.split()
    return [float(x) for x in out[3:]]
