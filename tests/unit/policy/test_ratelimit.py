"""Token buckets per session and per tool, with a fake clock (no test sleeps)."""
from __future__ import annotations

import threading

import pytest

from runner.policy import load_text
from runner.policy.model import Bucket
from runner.policy.ratelimit import RateLimiter, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_bucket_burst_then_refill():
    c = Clock()
    b = TokenBucket(3, 1.0, c)
    for _ in range(3):
        assert b.wait_time() == 0
        b.take()
    assert b.wait_time() == pytest.approx(1.0)
    c.t += 0.25
    assert b.wait_time() == pytest.approx(0.75)
    c.t += 10
    assert b.tokens == 3  # never above capacity


def test_bucket_ignores_clock_going_back():
    c = Clock()
    b = TokenBucket(1, 1.0, c)
    b.take()
    c.t -= 50
    assert b.wait_time() == pytest.approx(1.0)


def test_tool_refusal_says_when_to_retry():
    c = Clock()
    rl = RateLimiter(tools={"bash": Bucket(capacity=5, refill_per_second=0.5)}, clock=c)
    for _ in range(5):
        assert rl.acquire("s", "bash") is None
    c.t += 0.6  # 0.3 tokens back: 0.7 missing at 0.5/s = 1.4 s
    r = rl.acquire("s", "bash")
    assert r is not None and r.scope == "bash" and r.retry_after == pytest.approx(1.4)
    assert r.message == "rate limit: bash allows 5 calls per 10s; retry in 1.4s"
    assert rl.acquire("s", "read") is None  # other tools are not limited
    c.t += 1.4
    assert rl.acquire("s", "bash") is None


def test_retry_time_is_rounded_up():
    c = Clock()
    rl = RateLimiter(tools={"t": Bucket(capacity=1, refill_per_second=3)}, clock=c)
    rl.acquire("s", "t")
    r = rl.acquire("s", "t")
    assert r.retry_after == pytest.approx(0.4) and r.retry_after >= 1 / 3


def test_session_bucket_counts_all_tools_and_sessions_are_separate():
    c = Clock()
    rl = RateLimiter(session=Bucket(capacity=2, refill_per_second=0.1), clock=c)
    assert rl.acquire("a", "read") is None and rl.acquire("a", "bash") is None
    r = rl.acquire("a", "grep")
    assert r.scope == "session" and r.message == "rate limit: this session allows 2 calls per 20s; retry in 10.0s"
    assert rl.acquire("b", "read") is None


def test_refused_call_takes_no_token_from_the_other_bucket():
    c = Clock()
    rl = RateLimiter(session=Bucket(capacity=10, refill_per_second=1), tools={"bash": Bucket(capacity=1, refill_per_second=1)},
                     clock=c)
    assert rl.acquire("s", "bash") is None
    for _ in range(5):
        assert rl.acquire("s", "bash") is not None
    for _ in range(9):  # the session bucket still has its 9 tokens
        assert rl.acquire("s", "read") is None
    assert rl.acquire("s", "read").scope == "session"


def test_minutes_in_message_and_forget():
    c = Clock()
    rl = RateLimiter(tools={"w": Bucket(capacity=60, refill_per_second=0.25)}, clock=c)
    for _ in range(60):
        rl.acquire("s", "w")
    assert "allows 60 calls per 4min" in rl.acquire("s", "w").message
    rl.forget("s")
    assert rl.acquire("s", "w") is None


def test_from_policy_and_inactive():
    p = load_text("rate_limits:\n  tools:\n    bash: {capacity: 1, refill_per_second: 1}\n")
    rl = RateLimiter.from_policy(p.rate_limits, clock=Clock())
    assert rl.active and rl.acquire("s", "bash") is None and rl.acquire("s", "bash") is not None
    none = RateLimiter.from_policy(load_text("").rate_limits)
    assert not none.active and all(none.acquire("s", "bash") is None for _ in range(1000))


def test_thread_safe_exact_count():
    rl = RateLimiter(session=Bucket(capacity=100, refill_per_second=1e-9))
    ok = []

    def worker():
        for _ in range(50):
            if rl.acquire("s", "x") is None:
                ok.append(1)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(ok) == 100
