"""A warm pool of started, never-used sandboxes.

`get()` hands out a sandbox that nobody has used (from the pool when one is ready, else made
now) and a background thread makes a replacement. A sandbox is never returned to the pool:
each serves one session (or one call) and is then closed. `close()` empties the pool; it is
also called at the exit of the process that made it, and every container carries an expiry
label for `runner gc`.
"""
from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from typing import Callable

from . import finisher  # (first: its exit hook runs after _empty_pools)
from ..reporting import observe
from .sandbox import Sandbox


class SandboxPool:
    def __init__(self, factory: Callable[[], Sandbox], size: int = 1, tenant: str | None = None) -> None:
        self.factory = factory
        self.tenant = tenant  # whose sandboxes (runner/reporting/observe.py's warm_pool events say)
        self.size = max(0, size)
        self._ready: queue.Queue[Sandbox] = queue.Queue()
        self._wanted = threading.Semaphore(0)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self._thread: threading.Thread | None = None
        self._owner = os.getpid()  # a child forked without exec inherits the pool, not its sandboxes
        if self.size:
            for _ in range(self.size):
                self._wanted.release()
            self._thread = threading.Thread(target=self._fill, name="runner-pool", daemon=True)
            self._thread.start()
        _live.add(self)

    def _fill(self) -> None:
        while True:
            self._wanted.acquire()
            if self._closed.is_set():
                return
            try:
                sb = self.factory().start()
            except Exception as e:  # keep the reason; get() makes one itself and raises then
                self.errors = (self.errors + [str(e)])[-5:]
                self._closed.wait(1.0)
                self._wanted.release()
                continue
            with self._lock:
                if self._closed.is_set():
                    sb.close()
                    return
                self._ready.put(sb)

    def get(self) -> Sandbox:
        """A started sandbox that nobody used before."""
        while True:
            try:
                sb = self._ready.get_nowait()
            except queue.Empty:
                break
            if self.size:
                self._wanted.release()
            if sb.alive and not sb.used:
                observe.emit("warm_pool", tenant=self.tenant, hit=True)
                return sb
            sb.close()
        if self.size:
            observe.emit("warm_pool", tenant=self.tenant, hit=False)
        return self.factory().start()

    @property
    def ready(self) -> int:
        return self._ready.qsize()

    def close(self, background: bool = False) -> None:
        """Empty the pool: no sandbox is handed out from now on. background: waiting for a
        sandbox being made and removing the ready ones is left to runner/controller/finisher.py."""
        with self._lock:
            self._closed.set()
        self._wanted.release()  # wake the filler so it sees the flag
        if background:
            finisher.later(self._empty)
        else:
            self._empty()

    def _empty(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)  # let a sandbox being made finish, then close it
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
        _live.discard(self)


_live: "weakref.WeakSet[SandboxPool]" = weakref.WeakSet()


@atexit.register
def _empty_pools() -> None:
    """At exit, in the process that made them: a child forked without exec that exits normally
    runs its parent's exit hooks too, and must not close (remove) the parent's sandboxes."""
    for pool in list(_live):
        if pool._owner == os.getpid():
            pool.close()
