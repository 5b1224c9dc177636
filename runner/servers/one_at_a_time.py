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


class Stoppable:
    """One call whose client may give up on it. stop() ends it if it runs (Session.abort: its
    sandbox goes under it, the session's next call gets a fresh one) and keeps it from starting
    if it has not. Only this call: the call's thread calls end() before the session's turn passes
    on, and end() waits for a stop() under way."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = None  # the session (runner/controller/session.py) the call runs in, while it runs
        self.stopped = False

    def begin(self, session) -> bool:
        """The call starts in session; False (and it must not) once stop() came first."""
        with self._lock:
            self._running = None if self.stopped else session
            return not self.stopped

    def end(self) -> None:
        with self._lock:
            self._running = None

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            if self._running is not None:
                self._running.abort("the client of its call gave up on it")
