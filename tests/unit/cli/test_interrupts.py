"""runner/cli/interrupts.py: the first signal raises, the ones during cleanup are ignored, and the
previous handlers come back."""
from __future__ import annotations

import os
import signal

import pytest

from runner.cli.interrupts import SIGNALS, Interrupted, handled


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_first_signal_raises_later_ones_wait_for_the_cleanup(sig):
    before = {s: signal.getsignal(s) for s in SIGNALS}
    cleaned = []
    with pytest.raises(Interrupted) as e:
        with handled():
            try:
                os.kill(os.getpid(), sig)
                signal.pause()  # never reached: the handler raised
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # ignored: the cleanup runs to its end
                cleaned.append(True)
    assert cleaned == [True]
    assert e.value.exit_code == 128 + sig and str(e.value) == f"interrupted by {sig.name}"
    assert {s: signal.getsignal(s) for s in SIGNALS} == before
