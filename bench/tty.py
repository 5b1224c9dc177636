"""`runner exec -it`'s time to a shell prompt against `docker run -it`'s, the same hardened
container, each under a pseudo-terminal of its own: from the start of the command to the
prompt's first bytes on the terminal; then `exit` and the wait for its end (not timed)."""
from __future__ import annotations

import os
import select
import statistics
import subprocess
import time

PROMPT = b"rx$ "
SHELL = ["bash", "--norc", "-i"]


def to_prompt(argv: list[str], timeout: float = 60) -> float:
    """Seconds from spawning argv under a fresh pty to PROMPT on it."""
    master, slave = os.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while PROMPT not in seen:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise RuntimeError(f"no prompt from {argv[:3]} in {timeout}s: {seen[-200:]!r}")
            seen += os.read(master, 65536)
        took = time.perf_counter() - start
        os.write(master, b"exit\r")
        proc.wait(timeout=timeout)
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def prompt_section(n: int, results: dict) -> list[tuple]:
    from bench.run import ROOT
    from bench.scale import docker_run_hardened

    docker = docker_run_hardened()
    docker_it = docker[:2] + ["-it", "-e", f"PS1={PROMPT.decode()}"] + docker[2:] + SHELL
    runner_it = [str(ROOT / ".venv/bin/runner"), "exec", "-it", "-e", f"PS1={PROMPT.decode()}", "--", *SHELL]
    to_prompt(docker_it), to_prompt(runner_it)  # warm-up, untimed
    raw, ours = [], []
    for _ in range(n):  # taking turns: both see the same load
        raw.append(to_prompt(docker_it))
        ours.append(to_prompt(runner_it))
    results["docker_it_prompt"] = statistics.median(raw)
    results["runner_it_prompt"] = statistics.median(ours)
    return [("hardened `docker run -it ... bash` to its prompt", raw, None),
            ("`runner exec -it -- bash` to its prompt", ours, raw)]
