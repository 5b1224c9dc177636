"""SIGINT, SIGTERM and SIGHUP end every command the same way: the sandboxes it started are
removed, and it exits 128 + the signal's number (130, 143, 129), saying it was interrupted.

    with interrupts.handled():
        ...   # the first signal raises Interrupted here; the cleanup it runs is not cut short

Without this a SIGTERM killed `runner call` at once and left its container running.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal asked the command to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return f"interrupted by {signal.Signals(self.signum).name}"


def _on_signal(signum, frame) -> None:
    for s in SIGNALS:  # one is enough: the rest must not interrupt the cleanup this one starts
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Within the block (main thread only), the first of SIGINT, SIGTERM and SIGHUP raises
    Interrupted; later ones are ignored until the block is left, so `with Runner(...)` and
    `finally` blocks remove what was started. The previous handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
