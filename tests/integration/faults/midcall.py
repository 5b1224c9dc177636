"""Break something while a call runs: the one way the fault tests do it."""
from __future__ import annotations

import threading
from typing import Callable

from runner import Runner
from runner.controller.core import CALL_GRACE

TIMEOUT = 120  # the in-flight call's own timeout


def break_mid_call(r: Runner, ws, breaking: Callable[[], None]):
    """Start a long bash call, run `breaking` once the command runs, and return the call's
    result, which must come within the Runner's own bound on a call."""
    out: dict = {}
    marker = ws / "started"

    def go():
        out["result"] = r.call("bash", {"command": f"touch {marker.name}; exec sleep 600", "timeout": TIMEOUT})

    t = threading.Thread(target=go)
    t.start()
    while not marker.exists():
        assert t.is_alive(), out
        t.join(0.05)
    marker.unlink()
    breaking()
    t.join(TIMEOUT + CALL_GRACE)
    assert not t.is_alive(), "the call did not return within its timeout"
    return out["result"]
