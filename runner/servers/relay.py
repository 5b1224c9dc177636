"""A call's streamed output, from the thread that runs it to an asyncio consumer: the one relay
of `runner serve`'s event stream (calls?stream=true) and of MCP progress (`runner mcp`, serve's
/mcp).

    relay = OutputRelay()                    # made on the event loop
    work = run_in_thread(lambda: runner.call("bash", args, on_output=relay.feed))
    work.add_done_callback(lambda _: relay.close())
    async for text in relay.chunks(): ...    # until closed and drained

Policy: the tool never waits for the consumer. `feed` appends to a buffer bounded at `limit`
characters and wakes the consumer (at most one wake-up waits in the loop at a time); past the
bound the oldest text is dropped (of a single piece larger than the bound, its end is kept),
and the next chunk the consumer takes starts with a note of how many characters were dropped.
A slow or gone client thus costs at most `limit` characters of memory and gets the newest output.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from typing import AsyncIterator

PENDING_CHARS = 64 * 1024  # output waiting for the consumer; older text is dropped past this


class OutputRelay:
    """Text fed on any thread (Runner.call's on_output), taken in order on the event loop that
    made it. Made on that loop (it keeps it)."""

    def __init__(self, limit: int = PENDING_CHARS) -> None:
        self.limit = limit
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()  # set on the loop only
        self._lock = threading.Lock()
        self._pending: collections.deque[str] = collections.deque()
        self._chars = 0
        self._dropped = 0
        self._woken = False  # a wake-up is on its way to the loop: a feed need not send another
        self._closed = False
        self.total = 0  # characters fed so far
        self.through = 0  # characters fed up to the last chunk taken (MCP's progress: it only grows)

    def feed(self, text: str) -> None:
        """Add output (on the tool's thread). Never blocks on the consumer and never raises."""
        if not text:
            return
        with self._lock:
            if self._closed:
                return
            self.total += len(text)
            self._pending.append(text)
            self._chars += len(text)
            while self._chars > self.limit:
                old = self._pending.popleft()
                if not self._pending:  # one piece larger than the bound: keep its end
                    self._pending.append(old[-self.limit:])
                    self._dropped += len(old) - self.limit
                    self._chars = self.limit
                    break
                self._chars -= len(old)
                self._dropped += len(old)
            if self._woken:
                return
            self._woken = True
        self._wake()

    def close(self) -> None:
        """No more output (any thread): chunks() ends once it has given what is pending."""
        with self._lock:
            self._closed = True
        self._wake()

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is closed: there is no consumer left
            pass

    def take(self) -> str:
        """What is pending, after a note of what was dropped (if any); "" when nothing is."""
        with self._lock:
            text = "".join(self._pending)
            if self._dropped:
                text = f"[... {self._dropped} characters of output not relayed ...]\n" + text
            self._pending.clear()
            self._chars = self._dropped = 0
            self._woken = False
            self.through = self.total
            return text

    async def chunks(self) -> AsyncIterator[str]:
        """The output as it comes, each chunk all that was pending, until close()."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            with self._lock:
                closed = self._closed  # then nothing more is fed: this take is the last
            text = self.take()
            if text:
                yield text
            if closed:
                return
