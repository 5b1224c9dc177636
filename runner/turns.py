"""One call at a time per session, the waiting done in the event loop (runner mcp, runner serve)."""
from __future__ import annotations

import threading
from typing import Any, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread


async def in_turn(holder: Any, work: Callable[[], Any], abandon: bool, limiter) -> Any:
    """work() on a worker thread, one at a time per holder (its `turn`: None until first used).
    Requests waiting for their turn hold no thread, so one client flooding its session cannot
    starve the others; the turn passes on when the thread is done, even one whose request was
    cancelled and abandoned it."""
    if holder.turn is None:
        holder.turn = anyio.Semaphore(1)
    turn, token = holder.turn, anyio.lowlevel.current_token()
    await turn.acquire()
    guard, state = threading.Lock(), {"started": False, "gave_up": False}

    def run():
        with guard:
            if state["gave_up"]:
                return None
            state["started"] = True
        try:
            return work()
        finally:
            try:
                anyio.from_thread.run_sync(turn.release, token=token)
            except Exception:  # the loop is gone: nobody waits for the turn
                pass

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=abandon, limiter=limiter)
    except BaseException:
        with guard:
            if not state["started"]:  # cancelled before the thread began: it never will
                state["gave_up"] = True
                turn.release()
        raise
