"""runner/servers/one_at_a_time.py's Stoppable: a stop reaches the session only while its own call runs."""
from __future__ import annotations

import threading

from runner.servers.one_at_a_time import Stoppable


class FakeSession:
    def __init__(self) -> None:
        self.aborts: list[str] = []

    def abort(self, why: str) -> bool:
        self.aborts.append(why)
        return True


def test_a_stop_while_the_call_runs_aborts_its_session_once():
    s, call = FakeSession(), Stoppable()
    assert call.begin(s)
    call.stop()
    assert len(s.aborts) == 1 and "gave up" in s.aborts[0]
    call.end()
    call.stop()
    assert len(s.aborts) == 1


def test_a_stop_after_the_call_ended_touches_nothing_the_session_runs_next():
    s, call = FakeSession(), Stoppable()
    assert call.begin(s)
    call.end()
    call.stop()
    assert s.aborts == [] and call.stopped


def test_a_call_stopped_before_it_began_does_not_begin():
    s, call = FakeSession(), Stoppable()
    call.stop()
    assert not call.begin(s)
    assert s.aborts == []


def test_end_waits_for_a_stop_under_way():
    """The session's turn passes on after end(): a stop that began first finishes first, so its
    abort cannot land on the next call's sandbox."""
    entered, release, order = threading.Event(), threading.Event(), []

    class Slow(FakeSession):
        def abort(self, why: str) -> bool:
            entered.set()
            release.wait(10)
            order.append("abort")
            return True

    call = Stoppable()
    assert call.begin(Slow())
    t = threading.Thread(target=call.stop)
    t.start()
    assert entered.wait(10)
    ender = threading.Thread(target=lambda: (call.end(), order.append("end")))
    ender.start()
    ender.join(0.2)
    assert ender.is_alive()  # held while the abort runs
    release.set()
    t.join(10)
    ender.join(10)
    assert order == ["abort", "end"]
