"""Run by bench/.venv's Python only (bench/peers.py): time one peer against a local image and
print one JSON line {figure: [seconds, ...]} or {"error": why}. Never imports runner."""
from __future__ import annotations

import json
import sys
import time
import traceback


def timed(fn, n: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


# No network, as runner's sandboxes (and this engine may have no default bridge).
RUNTIME = {"network_mode": "none"}


def llm_sandbox(image: str, n: int) -> dict:
    from llm_sandbox import SandboxSession

    def start_stop():
        t = time.perf_counter()
        s = SandboxSession(lang="python", image=image, keep_template=True, verbose=False, runtime_configs=RUNTIME)
        s.open()
        took = time.perf_counter() - t
        s.close()
        return took

    starts = [start_stop() for _ in range(max(3, n // 2))]
    with SandboxSession(lang="python", image=image, keep_template=True, verbose=False, runtime_configs=RUNTIME) as s:
        calls = timed(lambda: s.execute_command("echo hi"), n * 5)
    return {"start": starts, "call": calls}


def swe_rex(image: str, n: int) -> dict:
    import asyncio

    from swerex.deployment.docker import DockerDeployment
    from swerex.runtime.abstract import BashAction, Command, CreateBashSessionRequest

    async def go():
        starts = []
        for _ in range(max(3, n // 2)):
            d = DockerDeployment(image=image, pull="never")
            t = time.perf_counter()
            await d.start()
            starts.append(time.perf_counter() - t)
            await d.stop()
        d = DockerDeployment(image=image, pull="never")
        await d.start()
        try:
            # execute: a new process per call (what runner's bash does); run_in_session: one
            # long-lived bash that every call types into (state carries from call to call)
            calls, session = [], []
            for i in range(n * 5 + 2):
                t = time.perf_counter()
                await d.runtime.execute(Command(command="echo hi", shell=True))
                if i >= 2:
                    calls.append(time.perf_counter() - t)
            await d.runtime.create_session(CreateBashSessionRequest())
            for i in range(n * 5 + 2):
                t = time.perf_counter()
                await d.runtime.run_in_session(BashAction(command="echo hi"))
                if i >= 2:
                    session.append(time.perf_counter() - t)
        finally:
            await d.stop()
        return {"start": starts, "call": calls, "call in its bash session": session}

    return asyncio.run(go())


def main() -> None:
    peer, image, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        out = {"llm-sandbox": llm_sandbox, "swe-rex": swe_rex}[peer](image, n)
    except ImportError as e:
        out = {"error": f"not installed in bench/.venv ({e})"}
    except Exception as e:  # a peer's failure is a figure we report, not a crash
        out = {"error": f"{type(e).__name__}: {e} | {traceback.format_exc().splitlines()[-3:]}"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
