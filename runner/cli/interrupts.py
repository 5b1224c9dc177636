"""SIGINT, SIGTERM and SIGHUP end every command the same way: the sandboxes it started are
removed, and it exits 128 + the signal's number (130, 143, 129), saying it was interrupted.

    with interrupts.handled():
        ...   # the first signal raises Interrupted here; the cleanup it runs is not cut short

Without this a SIGTERM killed `runner call` at once and left its container running.
"""
from __future__ import annotations

import contextlib
import os
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


# What `runner exec` passes on to its command once it runs, as `docker run` does (its sig-proxy).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH)


class Relay:
    """Signals caught for a running command: `fd` becomes readable when one arrives (the
    interpreter's wakeup fd), take() hands them over in order. Until `active` is set (the
    command runs) SIGINT, SIGTERM and SIGHUP interrupt as handled() does, so a container still
    being made is removed; QUIT, USR1 and USR2 do the same; WINCH is ignored."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.active = False
        self._got: list[int] = []

    def take(self) -> list[int]:
        if self.fd is not None:
            try:
                while os.read(self.fd, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        got, self._got = self._got, []
        return got

    def _on(self, signum, frame) -> None:
        if self.active:
            self._got.append(signum)
        elif signum != signal.SIGWINCH:
            for s in FORWARDED:
                signal.signal(s, signal.SIG_IGN)
            raise Interrupted(signum)


@contextlib.contextmanager
def relayed() -> Iterator[Relay]:
    """Within the block (main thread only), FORWARDED signals go to a Relay; the previous
    handlers and wakeup fd are restored afterwards. Elsewhere a Relay that never hears one."""
    if threading.current_thread() is not threading.main_thread():
        yield Relay(None)
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    relay = Relay(r)
    old = {s: signal.getsignal(s) for s in FORWARDED}
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    try:
        for s in FORWARDED:
            signal.signal(s, relay._on)
        yield relay
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(old_fd)
        os.close(r)
        os.close(w)
