"""The E2B form of a runner tenant key: what E2B's SDK accepts (`e2b_` then hex), decoded back to
the key runner checks; anything else is no key."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("connectrpc")

from runner.servers.e2b.app import e2b_key, runner_key  # noqa: E402

SDK_FORM = re.compile(r"^e2b_[0-9a-fA-F]+$")  # the form e2b.api.validate_api_key checks


def test_a_runner_key_round_trips_in_the_form_the_sdk_accepts():
    key = "rk_0123456789abcdef_SECRETsecret-_"
    form = e2b_key(key)
    assert SDK_FORM.match(form)
    assert runner_key(form) == key


@pytest.mark.parametrize("bad", ["", "rk_0123_x", "e2b_", "e2b_zz", "e2b_abc", "E2B_6162", "e2b_ff"])
def test_what_is_not_a_key(bad):
    assert runner_key(bad) is None
