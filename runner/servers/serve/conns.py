"""Bounds on the server's connections, held before any key is read: how many at once, how long a
request's headers may take to arrive, how long an idle keep-alive connection stays.

uvicorn (h11) bounds the size of a request's head (h11_max_incomplete_event_size) and idle
keep-alive (timeout_keep_alive), but not the time a head takes nor the number of connections: a
client that opens connections and never finishes their headers holds descriptors for ever. This
is uvicorn's own h11 protocol with that added: a connection whose head is not complete within
`header_timeout` seconds is closed, and past `max_connections` a new connection closes the oldest
one waiting for its client: for its head, for the rest of its body, or idle between two requests
(one whose whole request is in, being answered, keeps its place; only when none waits is the
newcomer refused). A tenant's request, sent whole at once, thus gets through a flood of half-open,
slow-body or idle kept-alive connections: they are the oldest waiting, so they go first. (Only
heads were evictable once: 768 idle kept-alive connections, each asking `GET /nope` every 2 s with
no key, or a tenant's 768 bodies that never end, held every slot and tenants got 0 answers of 5.)
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass


@dataclass
class ConnLimits:
    max_connections: int = 1024
    header_timeout: float = 10.0
    keep_alive_timeout: float = 5.0


class _Waiting:
    """The connections of one server still waiting for their request's head, oldest first."""

    def __init__(self) -> None:
        self.order: collections.OrderedDict = collections.OrderedDict()
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0


def protocol(limits: ConnLimits):
    """An h11 protocol class for uvicorn.Config(http=...), sharing one set of waiting connections."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting = _Waiting()

    class Guarded(H11Protocol):
        _header_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                if waiting.order:  # the oldest that has not sent its head yet makes room
                    old, _ = waiting.order.popitem(last=False)
                    waiting.evicted += 1
                    old._drop()
                else:  # every connection is in a request: no room for one more
                    waiting.refused += 1
                    self.connections.discard(self)
                    transport.abort()
                    return
            self._wait_for_head()

        def _wait_for_head(self) -> None:
            self._wait_for_client()
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout, self._head_too_slow)

        def _wait_for_client(self) -> None:
            """Evictable from now: its place is kept while it stays so (a trickle moves it no later)."""
            if self not in waiting.order:
                waiting.order[self] = time.monotonic()

        def _head_came(self) -> None:
            waiting.order.pop(self, None)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _head_too_slow(self) -> None:
            self._header_timer = None
            if self in waiting.order:
                waiting.timed_out += 1
                waiting.order.pop(self, None)
                self._drop()

        def _drop(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            if not self.transport.is_closing():
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.is_closing():
                self._head_came()
            elif self.conn.their_state is h11.IDLE:  # a head still coming (a new one on a kept-alive connection too)
                self._wait_for_head()
            elif self.conn.their_state is h11.SEND_BODY:  # a head in, a body still coming: no head timer, evictable
                self._head_came()
                self._wait_for_client()
            else:
                self._head_came()

        def connection_lost(self, exc) -> None:
            self._head_came()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            self._head_came()
            super().on_response_complete()
            # idle now (uvicorn's keep-alive timeout holds until the next byte comes), or a next
            # request pipelined behind this one already begun: evictable unless that one is all in
            if not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                self._wait_for_client()

    Guarded.waiting = waiting
    return Guarded


def fit(most: int, besides: int) -> tuple[int, int | None]:
    """Connections at once the open-files limit allows, after raising it toward `most` plus twice
    `besides` (what the server opens besides its connections): (that number, the limit when it
    held the number under `most`, else None)."""
    have = raise_descriptor_limit(most + 2 * besides)
    if have < most + besides:
        return max(16, have - besides), have
    return most, None


def raise_descriptor_limit(want: int) -> int:
    """The process's soft limit of open files raised toward `want` (up to the hard limit); returns it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    return soft
