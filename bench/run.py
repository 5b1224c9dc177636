"""`make bench`: runner against raw `docker run --rm`, `docker exec`, a local fork and (when
`make bench-peers` installed them in bench/.venv) its peers, in one run.

Prints the issue's ratios first (same-run ratios are what to compare: absolute figures move with
the machine's load, printed beside them), then each section: medians, p99 where many samples are
cheap, and each figure's ratio to its baseline. `--quick` for a short run. Never part of the
test suite; no thresholds here, only figures.
"""
from __future__ import annotations

import argparse
import atexit
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
IMAGE = "runner/base:latest"
LABEL = "runner.bench=1"
# `docker run` hardened as runner hardens a sandbox (executors/docker/config.py's defaults).
HARDENED = ["--network", "none", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
            "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m", "--pids-limit", "256", "--memory", "512m",
            "--memory-swap", "512m", "--cpus", "1", "--user", "1000:1000", "--log-driver", "none", "--init"]


def workspace(prefix: str) -> Path:
    """A fresh temporary workspace for a section, removed when the bench ends."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def timed(fn, n: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def timed_together(fns: list, n: int, warmup: int = 1, turn: int = 1, gap: float = 0.0) -> list[list[float]]:
    """timed() for several commands taking turns, `turn` runs of each per round: a figure and its
    floor then see the same load (the machine is shared), so their ratio holds when it moves.
    A turn of many keeps calls back to back within it, and starts with `warmup` untimed runs.
    gap: seconds of sleep before each timed run (an agent thinks between its calls)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    out = [[] for _ in fns]
    for _ in range(max(1, n // turn)):
        for fn, xs in zip(fns, out, strict=True):
            for _ in range(warmup if turn > 1 else 0):
                fn()
            for _ in range(turn):
                if gap:
                    time.sleep(gap)
                t = time.perf_counter()
                fn()
                xs.append(time.perf_counter() - t)
    return out


def idle_polling() -> str:
    """How long an idle (virtual) CPU polls before it halts, where the haltpoll idle driver runs
    (a KVM guest): a wake-up of a halted vCPU costs a VM exit, and a call has more of them on its
    path than a fork (DESIGN.md). Empty elsewhere."""
    try:
        ns = int(Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text())
    except (OSError, ValueError):
        return ""
    return f", idle vCPUs poll {ns // 1000} us before they halt (haltpoll.guest_halt_poll_ns)"


def machine_line() -> str:
    """The CPU under this machine and what the kernel does on each entry: a VM of the same kind
    may land on another host (the same code has measured a local fork at 0.49 and at 0.71 ms in
    turns on two days), so figures are compared only where this line is the same."""
    info: dict = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        return ""
    vuln = Path("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow")
    srso = vuln.read_text().strip() if vuln.exists() else ""
    return (f"\n# cpu: {info.get('model name', '?')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}), kernel {platform.release()}" + (f", SRSO: {srso}" if srso else ""))


def runtimes_line() -> str:
    """Which OCI runtime the sandboxes get (executors/docker/runtimes.py) and which one a raw
    `docker run` or `docker exec` baseline gets (the engine's default): crun starts a container
    in less time than runc, so a ratio between the two says so."""
    try:
        from executors.docker.runtimes import pick
        from executors.docker.wire import Engine, socket_path

        info = Engine(socket_path()).json("GET", "/info")
    except Exception:
        return ""
    ours = pick(info) or info.get("DefaultRuntime")
    return f"; sandboxes run under {ours}, raw docker under the engine's default, {info.get('DefaultRuntime')}"


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]


def run(argv: list[str]) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)


def exec_section(n: int, results: dict) -> list[tuple]:
    from bench.scale import docker_run_hardened
    from executors.docker import DockerExecutor
    from executors.local import LocalExecutor

    rows = []
    fork = timed(lambda: run(["sh", "-c", "true"]), n * 5)
    rows.append(("local fork+exec `sh -c true`", fork, None))
    local = LocalExecutor("/tmp")
    rows.append(("executors.local run(['true'])", timed(lambda: local.run(["true"]), n * 5), fork))

    docker_run = timed(lambda: run(["docker", "run", "--rm", "--network", "none", IMAGE, "true"]), n)
    rows.append(("raw `docker run --rm IMG true`", docker_run, None))
    # runner exec (the local engine: executors/docker/oneshot.py over wire.py) taking turns with
    # its floor, the docker CLI asked for the same hardened container
    hardened, runner_exec = timed_together([lambda: run(docker_run_hardened() + ["true"]),
                                            lambda: run([str(ROOT / ".venv/bin/runner"), "exec", "--", "true"])], n)
    rows.append(("hardened `docker run --rm ... IMG true` (CLI)", hardened, docker_run))
    rows.append(("`runner exec -- true` (CLI, per-call)", runner_exec, hardened))
    results["docker_run_hardened"] = statistics.median(hardened)
    results["runner_exec"] = statistics.median(runner_exec)
    percall = DockerExecutor(lifecycle="per-call", labels={"runner.bench": "1"})
    percall.start()
    rows.append(("DockerExecutor per-call run(['true'])", timed(lambda: percall.run(["true"]), n), hardened))
    percall.stop()

    cid = subprocess.run(["docker", "run", "-d", "--rm", "--label", LABEL, "--network", "none", IMAGE, "sleep", "600"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        docker_exec = timed(lambda: run(["docker", "exec", cid, "true"]), n * 2)
        rows.append(("raw `docker exec CID true`", docker_exec, None))
        with DockerExecutor(labels={"runner.bench": "1"}) as session:
            rows.append(("DockerExecutor per-session run(['true'])", timed(lambda: session.run(["true"]), n * 2), docker_exec))
    finally:
        run(["docker", "rm", "-f", cid])
    pyfloor, helps, command_helps = timed_together([lambda: run([sys.executable, "-c", "pass"]),
                                                    lambda: run([str(ROOT / ".venv/bin/runner"), "--help"]),
                                                    lambda: run([str(ROOT / ".venv/bin/runner"), "exec", "--help"])], n)
    rows.append(("python3 -c pass (floor for any Python CLI)", pyfloor, None))
    rows.append(("`runner --help` start-up", helps, pyfloor))
    rows.append(("`runner exec --help` (argparse, one command's parser)", command_helps, pyfloor))
    results["help"] = statistics.median(helps)
    results["command_help"] = statistics.median(command_helps)
    results["python_floor"] = statistics.median(pyfloor)
    return rows


def print_table(title: str, rows: list[tuple], notes: list[str] = ()) -> None:
    print(f"\n## {title}\n")
    if rows:
        print(f"| {'what':58} | {'n':>4} | {'median ms':>9} | {'p99 ms':>8} | {'ratio':>14} |")
        print(f"|{'-' * 60}|{'-' * 6}|{'-' * 11}|{'-' * 10}|{'-' * 16}|")
    for name, xs, base in rows:
        med = statistics.median(xs) * 1000
        ratio = f"{med / (statistics.median(base) * 1000):.2f}x baseline" if base else "baseline" if base is None else "-"
        print(f"| {name:58} | {len(xs):4} | {med:9.2f} | {p99(xs) * 1000:8.2f} | {ratio:>14} |")
    for note in notes:
        print(f"- {note}")


GOALS = [  # (what, runner's key, baseline's key, goal as a ratio or an absolute bound, how to show)
    ("tool call in a session (bash `echo hi`) / local fork `sh -c`", "bash_call", "fork_turns", "<= 0.8x"),
    ("  same, 50 ms between calls, / the fork at that pace", "bash_call_paced", "fork_paced", "<= 1.0x"),
    ("session start, cold (sandbox ready for calls)", "cold_start", None, "<= 60 ms"),
    ("session start from the warm pool", "warm_get", None, "<= 5 ms"),
    ("`runner exec -- true` / hardened `docker run --rm` (CLI)", "runner_exec", "docker_run_hardened", "<= 1.2x"),
    ("`runner exec -it -- bash` / hardened `docker run -it` to the prompt", "runner_it_prompt", "docker_it_prompt",
     "<= 1.1x"),
    ("`runner call bash` one-shot / `docker run --rm` same image+command", "first_runner_call", "first_docker_run",
     "<= 1.0x"),
    ("fresh process: Runner() start + first call / that `docker run --rm`", "first_start_call", "first_docker_run",
     "<= 0.6x"),
    ("fresh process: `from runner import Runner`", "first_import", None, "<= 100 ms"),
    ("fresh process: close()", "first_close", None, "<= 20 ms"),
    ("`runner session` start to first answer / that `docker run --rm`", "first_session", "first_docker_run", "-"),
    ("`runner --help` (python -c pass beside it)", "help", "python_floor", "<= 80 ms"),
    ("Runner.pause() of an idle session", "state_pause", None, "<= 20 ms"),
    ("Runner.resume()", "state_resume", None, "<= 20 ms"),
    ("snapshot of a session with a 100 MiB workspace", "state_snapshot_100m", None, "<= 1 s"),
    ("first call answered from a snapshot / a fresh Runner's", "state_first_call", "state_fresh", "<= 300 ms"),
    ("fork x10 ready", "state_fork10", None, "<= 2 s"),
    ("  `runner exec --help`: argparse and one command's parser", "command_help", "python_floor", "-"),
]


def print_summary(results: dict, load_before: str) -> None:
    print(f"\n## ratios first (load average {load_before} at the start, {loadavg()} now: compare ratios, "
          "re-run on a quiet machine for absolute figures)\n")
    print(f"| {'what':60} | {'runner ms':>9} | {'baseline ms':>11} | {'ratio':>6} | goal |")
    print(f"|{'-' * 62}|{'-' * 11}|{'-' * 13}|{'-' * 8}|------|")
    for what, key, base, goal in GOALS:
        if key not in results:
            continue
        v = results[key] * 1000
        b = results[base] * 1000 if base in results else None
        ratio = f"{v / b:.2f}x" if b else "-"
        print(f"| {what:60} | {v:9.2f} | {(f'{b:.2f}' if b else '-'):>11} | {ratio:>6} | {goal} |")
    extra = []
    if "cpu_call_sandbox" in results:
        ours = results["cpu_call_controller"] + results["cpu_call_sandbox"]
        fork = results["cpu_fork_parent"] + results["cpu_fork_child"]
        extra.append(f"CPU per call, every process: runner's bash call {ours * 1e3:.2f} ms (controller "
                     f"{results['cpu_call_controller'] * 1e3:.2f} + sandbox {results['cpu_call_sandbox'] * 1e3:.2f}), "
                     f"the fork {fork * 1e3:.2f} ms (parent {results['cpu_fork_parent'] * 1e3:.2f} + child "
                     f"{results['cpu_fork_child'] * 1e3:.2f}): {ours / fork:.2f}x. Back to back the two sides "
                     "overlap; after a pause a call pays for all of it on a cold CPU")
    if "bash_turn_ends" in results:
        (bh, bt), (fh, ft) = results["bash_turn_ends"], results["fork_turn_ends"]
        extra.append(f"in those turns, a call among the first 20 of its turn {bh * 1e3:.2f} ms, among the last 20 "
                     f"{bt * 1e3:.2f} ms (the fork's: {fh * 1e3:.2f}, {ft * 1e3:.2f} ms). The ratio follows the last: "
                     "how soon after the fork's turn the kernel runs the sandbox's processes on both CPUs again "
                     "(settled, a call is ~0.6 ms; DESIGN.md)")
    if "agent_turns_ratio" in results and "bash_call" in results:
        extra.append(f"lent shells (runner/controller/lent_shells.py) against the agent's path in the same run: in turns "
                     f"{results['bash_call'] / results['fork_turns']:.2f}x against {results['agent_turns_ratio']:.2f}x, "
                     f"50 ms apart {results['bash_call_paced'] / results['fork_paced']:.2f}x against "
                     f"{results['agent_paced_ratio']:.2f}x the fork")
    if "call_with_1" in results:
        lv = [k for k in ("call_with_1", "call_with_10", "call_with_50") if k in results]
        extra.append("call latency with " + ", ".join(f"{k.split('_')[-1]} live: {results[k] * 1000:.2f} ms" for k in lv))
    if "sandbox_mem" in results:
        extra.append(f"memory per idle sandbox {results['sandbox_mem'] / 2 ** 20:.1f} MiB (goal <= 8 MiB; + controller "
                     f"{results['controller_mem_per_session'] / 2 ** 20:.2f} MiB): ~{results['fit_8gib']} fit in 8 GiB")
    for c in (1, 4):
        if f"percall_rate_{c}" in results:
            extra.append(f"{c} client(s): per-call sandboxes {results[f'percall_rate_{c}']:.1f}/s vs the engine's "
                         f"create+start+remove {results[f'engine_rate_{c}']:.1f}/s "
                         f"({results[f'percall_rate_{c}'] / results[f'engine_rate_{c}']:.2f}x"
                         f"{', goal >= 1.0x' if c == 4 else ''})")
    if "flood_mb_s" in results:
        extra.append(f"flood through bash {results['flood_mb_s']:.0f} MB/s, controller RSS grew "
                     f"{results['flood_rss_growth'] / 2 ** 20:.1f} MiB")
    servers = [(name, results[key]) for name, key in (("runner mcp", "mcp_flood_rss_growth"),
                                                     ("runner serve", "http_flood_rss_growth")) if key in results]
    if servers:
        extra.append("the same flood through the servers: RSS grew " +
                     ", ".join(f"{name} {grew / 2 ** 20:.1f} MiB" for name, grew in servers))
    for peer in ("swe-rex", "llm-sandbox"):
        if f"peer_{peer}_call" in results and "bash_call" in results:
            extra.append(f"{peer}: a call {results[f'peer_{peer}_call'] * 1000:.2f} ms (runner's bash call: "
                         f"{results['bash_call'] / results[f'peer_{peer}_call']:.2f}x that), a start "
                         f"{results[f'peer_{peer}_start'] * 1000:.0f} ms")
    for e in extra:
        print(f"- {e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=None, help="samples per docker measurement (default 20, quick 5)")
    ap.add_argument("--quick", action="store_true", help="a short run: fewer samples, 10 sessions, a 100 MB flood")
    ap.add_argument("--only", default="", help="comma-separated sections: "
                    "first,exec,tty,tools,steps,api,custom,density,throughput,memory,peers,broker,serve,e2b,state")
    args = ap.parse_args()
    n = args.n or (5 if args.quick else 20)
    only = {x for x in args.only.split(",") if x}
    # The editable install's sources get no .pyc where PYTHONDONTWRITEBYTECODE is set (here it is):
    # every CLI start would compile runner's modules again. Measure the program, not the compiler.
    import compileall

    for pkg in ("runner", "executors"):
        compileall.compile_dir(str(ROOT / pkg), quiet=1)
    load_before = loadavg()
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    print(f"# runner bench, {time.strftime('%Y-%m-%d %H:%M')}, {cores} cores, load average {load_before}"
          f"{' (quick)' if args.quick else ''}{idle_polling()}{runtimes_line()}{machine_line()}")
    results: dict = {}
    sections: list = []

    def want(name):
        return not only or name in only

    def step(name, fn):
        if not want(name):
            return
        t = time.monotonic()
        print(f"[bench] {name} (load {loadavg()}) ...", file=sys.stderr, flush=True)
        try:
            out = fn()
        except Exception as e:  # one section failing does not lose the others
            out = [(f"{name}: FAILED", [], [f"{type(e).__name__}: {e}"])]
        sections.extend(out)
        print(f"[bench] {name} took {time.monotonic() - t:.0f}s", file=sys.stderr, flush=True)

    from bench import api, custom, first, flood, peers, scale, state, steps, tools, tty

    step("first", lambda: first.first_section(n, results, IMAGE, workspace))
    step("exec", lambda: [("commands: runner vs raw docker and a local fork", exec_section(n, results), [])])
    step("tty", lambda: [("interactive: time to a shell prompt under a terminal", tty.prompt_section(n, results), [])])
    step("tools", lambda: tools.tools_section(n, results))
    step("steps", lambda: steps.steps_section(n))
    step("api", lambda: api.api_section(n))
    if not args.quick:
        step("custom", lambda: [(t, r, []) for t, r in custom.custom_section(n)])
    step("density", lambda: scale.density_section(n, args.quick, results))
    step("throughput", lambda: scale.throughput_section(n, args.quick, results))
    step("memory", lambda: scale.flat_memory_section(n, args.quick, results) + flood.flood_section(args.quick, results))
    step("peers", lambda: peers.peers_section(n, results))
    from bench.broker import broker_section

    step("broker", lambda: broker_section(max(n, 20), results))
    step("state", lambda: state.state_section(n, results))
    print_summary(results, load_before)
    for title, rows, notes in sections:
        print_table(title, rows, notes)
    if want("serve") and not args.quick:
        try:  # runner serve under load (the extra runner[serve])
            import fastapi  # noqa: F401

            from bench.serve import serve_section
        except ImportError:
            print("\nrunner serve: not measured (install runner[serve])")
        else:
            serve_section()
    if want("e2b") and not args.quick:
        try:  # E2B's API on runner serve, through the official SDK (the extras e2b and e2b-test)
            import e2b  # noqa: F401

            from bench.e2b_api import e2b_section
        except ImportError:
            print("\nE2B API: not measured (install runner[e2b,e2b-test])")
        else:
            print("\nE2B API on runner serve (bench/e2b_api.py):")
            for line in e2b_section():
                print(line)
    print(f"\nload average at the end: {loadavg()}")


if __name__ == "__main__":
    main()
