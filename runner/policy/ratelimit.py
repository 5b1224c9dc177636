"""Rate limits: token buckets per session and per tool (within a session).

    limiter = RateLimiter.from_policy(policy.rate_limits)
    refusal = limiter.acquire(session_id, "bash")
    if refusal:
        return ToolResult.error(refusal.message, error_type=ErrorType.GATED)

A bucket holds up to `capacity` tokens and gains `refill_per_second`; a call takes one token
from its session's bucket and one from its tool's. When either is empty nothing is taken and
the refusal says when to retry. The clock is injectable so tests never sleep.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # only attributes are used (capacity, refill_per_second): no pydantic import
    from .model import Bucket, RateLimits


class TokenBucket:
    def __init__(self, capacity: int, refill_per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1 or refill_per_second <= 0:
            raise ValueError("a bucket needs capacity >= 1 and refill_per_second > 0")
        self.capacity = capacity
        self.rate = refill_per_second
        self._clock = clock
        self._tokens = float(capacity)
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._stamp:
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = max(self._stamp, now)

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until n tokens are there (0 when they are)."""
        self._refill()
        return 0.0 if self._tokens >= n else (n - self._tokens) / self.rate

    def take(self, n: float = 1.0) -> None:
        self._refill()
        self._tokens -= n

    def describe(self) -> str:
        """'5 calls per 10s': the sustained rate in the words people use."""
        return f"{self.capacity} calls per {_secs(self.capacity / self.rate)}"


def _secs(s: float) -> str:
    if s >= 120 and abs(s / 60 - round(s / 60)) < 1e-9:
        return f"{round(s / 60)}min"
    return f"{s:.3g}s"


@dataclass(frozen=True)
class Refusal:
    scope: str  # "session" or the tool's name
    retry_after: float  # seconds
    message: str

    def __str__(self) -> str:
        return self.message


class RateLimiter:
    """Buckets created on first use for each (session) and each (session, tool). Thread-safe."""

    def __init__(self, session: Bucket | None = None, tools: dict[str, Bucket] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session_rule = session
        self.tool_rules = dict(tools or {})
        self._clock = clock
        self._buckets: dict[tuple[str, str | None], TokenBucket] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_policy(cls, limits: RateLimits, clock: Callable[[], float] = time.monotonic) -> "RateLimiter":
        return cls(limits.session, limits.tools, clock)

    @property
    def active(self) -> bool:
        return self.session_rule is not None or bool(self.tool_rules)

    def _bucket(self, session: str, tool: str | None, rule: Bucket) -> TokenBucket:
        key = (session, tool)
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = TokenBucket(rule.capacity, rule.refill_per_second, self._clock)
        return b

    def acquire(self, session: str, tool: str) -> Refusal | None:
        """Take one token for this call, or say why not (and take nothing)."""
        if not self.active:
            return None
        with self._lock:
            checks: list[tuple[str, TokenBucket]] = []
            if self.session_rule is not None:
                checks.append(("session", self._bucket(session, None, self.session_rule)))
            rule = self.tool_rules.get(tool)
            if rule is not None:
                checks.append((tool, self._bucket(session, tool, rule)))
            worst: tuple[float, str, TokenBucket] | None = None
            for scope, b in checks:
                w = b.wait_time()
                if w > 0 and (worst is None or w > worst[0]):
                    worst = (w, scope, b)
            if worst is not None:
                wait, scope, b = worst
                shown = math.ceil(wait * 10) / 10  # never tell someone to retry too early
                who = "this session" if scope == "session" else scope
                return Refusal(scope, shown, f"rate limit: {who} allows {b.describe()}; retry in {shown:.1f}s")
            for _, b in checks:
                b.take()
            return None

    def forget(self, session: str) -> None:
        """Drop a finished session's buckets."""
        with self._lock:
            for key in [k for k in self._buckets if k[0] == session]:
                del self._buckets[key]
