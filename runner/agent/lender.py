"""Spare shells lent to the controller (runner/controller/lent_shells.py says why and what it does with them).

The lender has zygotes of its own (agent/zygote.py), apart from the one the agent's own shell
calls use (procs._Keeper): ZYGOTES of them, each with one spare at a time, being forked or lent.
A spare is lent (its three descriptors sent with a `spare` line) as soon as it runs, and its
zygote is asked for the next at once: that token waits in the zygote's input, and the zygote
forks the next spare the moment the lent one has ended. With one zygote, calls back to back
waited for that chain (the zygote's wake-up and fork, the spare's set-up, the agent's wake-up
and send: ~0.6 ms a call here); with two, the controller holds the other's spare meanwhile.

All of it runs on the agent's own thread: the loop hands pending()'s descriptors to their
handlers while it waits for a request (server.Wire.receive).
"""
from __future__ import annotations

import collections
import functools
import signal
import subprocess

from . import fsutil, procs, zygote
from .context import Ctx, dir_id

ZYGOTES = 2


class _Slot:
    def __init__(self) -> None:
        self.zygote: "zygote.Zygote | None" = None
        self.forked: "zygote.Forked | None" = None  # asked for, not yet lent
        # the last two lent: the controller asks for the status of the one it ran after its next is lent
        self.lent: collections.deque = collections.deque(maxlen=2)
        self.retry = False  # the ask for the next failed while the zygote had a lent spare to tell of


class Lender:
    def __init__(self, ctx: Ctx, send) -> None:
        self.ctx, self.send = ctx, send  # send(msg, fds): server.Wire.lend
        self.slots = [_Slot() for _ in range(ZYGOTES)]
        self.failures = 0  # zygotes that failed in a row; at procs.ZYGOTE_TRIES no more are started
        for slot in self.slots:
            self._order(slot)

    def pending(self) -> list:
        """(a zygote's pipe, its handler) for each spare asked for and not yet lent, and each
        zygote to ask again once its lent spare has ended."""
        return [(slot.zygote.out, functools.partial(self._settle, slot)) for slot in self.slots
                if (slot.forked is not None or slot.retry) and slot.zygote is not None and not slot.zygote.closed]

    def _order(self, slot: _Slot) -> None:
        """The slot's next spare asked for (its zygote started, or replaced, if need be). A zygote
        whose ask fails (say, a process of the sandbox filled its input) while it is yet to tell
        of its lent spare is kept until it has (retry): replaced, the status would be lost."""
        while slot.forked is None and self.failures < procs.ZYGOTE_TRIES and procs.BASH is not None:
            try:
                z = slot.zygote
                if z is None or not z.alive():  # (one in a replaced directory: _settle)
                    self._drop(slot)
                    with fsutil.UMASK_LOCK:
                        slot.zygote = zygote.Zygote(procs.BASH, self.ctx.workspace, self.ctx.env)
                slot.forked = slot.zygote.order(lend=True)
            except (OSError, subprocess.SubprocessError, zygote.ZygoteError):
                self.failures += 1
                if slot.zygote is not None and slot.zygote.alive() and slot.lent and slot.lent[-1].returncode is None:
                    slot.retry = True
                    return
                self._drop(slot)

    def _settle(self, slot: _Slot) -> None:
        """Take the slot's spare's ready line if it has come; once it runs, lend it and ask for
        the next. For a retry, ask again once the zygote has told the lent spare's end."""
        forked = slot.forked
        if forked is None:
            if slot.retry and slot.lent[-1].wait(0) is not None:  # (-SIGKILL if the zygote ended)
                slot.retry = False
                self._order(slot)
            return
        try:
            if not forked.ready(0):
                # The zygote's word, not the FIFOs' names (six system calls at each wake-up that
                # came before the ready line, most calls back to back): a process of the sandbox
                # removed its FIFOs, so the zygote skipped its token, or the spare ended unready
                if forked.lost(names=False):
                    slot.forked = None  # (lost() closed it)
                    self._order(slot)
                return
        except (OSError, ValueError, zygote.ZygoteError):  # the zygote ended (say, killed by a call)
            slot.forked = None
            self.failures += 1
            self._drop(slot)
            self._order(slot)
            return
        self.failures = 0
        slot.forked = None
        if forked.zygote.cwd_id != dir_id(self.ctx.workspace):  # the workspace's directory was replaced
            forked.discard()
            self._drop(slot)
            self._order(slot)
            return
        try:
            self.send({"op": "spare", "pid": forked.pid}, forked.fds())
        except (OSError, ValueError):  # no socket after all: no lending
            forked.discard()
            self.failures = procs.ZYGOTE_TRIES
            self._drop(slot)
            return
        forked.close()  # the controller's now: the spare reads its command's end at the controller's close
        if len(slot.lent) == slot.lent.maxlen:  # its status is no one's to ask any more
            old = slot.lent[0]
            old.zygote.ended.pop(old.pid, None)
        slot.lent.append(forked)
        self._order(slot)

    def _lent(self, pid) -> "tuple[_Slot, zygote.Forked] | tuple[None, None]":
        for slot in self.slots:
            for forked in slot.lent:
                if forked.pid == pid:
                    return slot, forked
        return None, None

    def status(self, pid, wait: "float | None") -> "int | None":
        """The exit code of the lent spare pid once it has ended (the zygote's word); None if it
        has not within wait seconds, or pid is no lent spare. wait None: as a call's end, once
        its output has (procs.run_streamed): KILL_GRACE for it, then its group is killed and the
        zygote's word taken (a stopped zygote is let go on to tell it, then replaced)."""
        slot, forked = self._lent(pid)
        if forked is None:
            return None
        if wait is None:
            rc = forked.wait(procs.KILL_GRACE)
            if rc is None:
                procs.kill_group(forked.pid, signal.SIGKILL)
                rc = forked.wait()
        else:
            rc = forked.wait(wait)
        self._again(slot)
        return None if rc is None else procs.code_of(rc)

    def kill(self, pid) -> None:
        """The lent spare pid and its process group end, as a call's at its timeout: TERM,
        KILL_GRACE, KILL, and until no process of the group is left."""
        slot, forked = self._lent(pid)
        if forked is None:
            return
        procs.kill_group(forked.pid, signal.SIGTERM)
        if forked.wait(procs.KILL_GRACE) is None:
            procs.kill_group(forked.pid, signal.SIGKILL)
            forked.wait(procs.KILL_GRACE)
        procs.group_gone(forked.pid, procs.KILL_GRACE)
        self._again(slot)

    def _again(self, slot: _Slot) -> None:
        """After a lent spare's status: the next one's ready line may have come with it, or the
        zygote was closed meanwhile (then another is started)."""
        if slot.forked is not None:
            self._settle(slot)
        else:
            self._order(slot)

    def _drop(self, slot: _Slot) -> None:
        if slot.forked is not None:
            slot.forked.close()
            slot.forked = None
        if slot.zygote is not None:
            slot.zygote.close()
            slot.zygote = None

    def close(self) -> None:
        """Every lent spare's group is killed, and the zygotes end."""
        for slot in self.slots:
            for forked in slot.lent:
                if not forked.gone():  # (a pid reaped may be another process's by now)
                    procs.kill_group(forked.pid, signal.SIGKILL)
            slot.lent.clear()
            self._drop(slot)


_lender: "Lender | None" = None


def start(ctx: Ctx, send) -> None:
    global _lender
    if _lender is None:
        _lender = Lender(ctx, send)


def pending() -> list:
    return [] if _lender is None else _lender.pending()


def status(pid, wait: "float | None") -> "int | None":
    return None if _lender is None else _lender.status(pid, wait)


def kill(pid) -> None:
    if _lender is not None:
        _lender.kill(pid)


def shutdown() -> None:
    if _lender is not None:
        _lender.close()
