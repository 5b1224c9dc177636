"""Work that may finish after the answer: a closed Runner's sandboxes are removed here.

Closing a Runner waited for its container to end and be removed (85-94 ms, issue 52); the
caller needs neither. `later(fn)` queues the work, and one thread runs the queue in order, one
job at a time (an egress network is removed after the sandboxes on it, queued before it).

The thread is not a daemon: the interpreter joins it before it exits (before the atexit hooks),
so a process that closes a Runner and exits at once still removes every container it made;
`wait()` waits for it on demand (a test that counts containers, the bench). A child forked
without exec owns none of its parent's work: its queue starts empty.
"""
from __future__ import annotations

import atexit
import collections
import os
import threading
from typing import Callable

_lock = threading.Lock()
_done = threading.Condition(_lock)
_jobs: collections.deque[Callable[[], None]] = collections.deque()
_pending = 0  # jobs queued or running
_thread: threading.Thread | None = None


def later(fn: Callable[[], None]) -> None:
    """Run fn on the finisher's thread, after what was queued before it. Where no thread can be
    started (the interpreter is shutting down), it runs now."""
    global _thread, _pending
    with _lock:
        _jobs.append(fn)
        _pending += 1
        if _thread is not None:
            return
        thread = threading.Thread(target=_run, name="runner-finisher", daemon=False)
        try:
            thread.start()
        except RuntimeError:  # (no new thread at interpreter shutdown): run the queue here
            thread = None
        else:
            _thread = thread
    if thread is None:
        _run()


def _run() -> None:
    global _thread, _pending
    while True:
        with _lock:
            if not _jobs:
                if _thread is threading.current_thread():
                    _thread = None
                _done.notify_all()
                return
            fn = _jobs.popleft()
        try:
            fn()
        except Exception:  # a removal that fails leaves its container to the label sweeps (runner gc)
            pass
        finally:
            with _lock:
                _pending -= 1
                if not _pending:
                    _done.notify_all()


def wait(timeout: float | None = None) -> bool:
    """Wait until everything queued so far is done; False if timeout passed first."""
    with _lock:
        return _done.wait_for(lambda: _pending == 0, timeout)


def pending() -> int:
    with _lock:
        return _pending


def _forget_in_child() -> None:
    global _lock, _done, _jobs, _pending, _thread
    _lock = threading.Lock()
    _done = threading.Condition(_lock)
    _jobs = collections.deque()
    _pending = 0
    _thread = None


os.register_at_fork(after_in_child=_forget_in_child)
# What an exit hook queued (a Runner closed in one, the warm pools': runner/controller/pool.py imports this
# module first, so this hook runs after theirs) comes after the interpreter joined its threads.
atexit.register(wait)
