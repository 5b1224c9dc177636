"""A live policy change of any shape a tenant may send (issue 49 review): runner serve measures it
against the grant without failing (a 500), and the change itself is then refused (422) or kept
within the grant (403) -- never widened."""
from __future__ import annotations

import pytest

from runner.controller.live_policy import overrides, within_grant
from runner.errors import RunnerError
from runner.policy import load

BASE = {"network.mode": "allowlist", "network.allow": ["api.github.com", "pypi.org:443"]}


@pytest.mark.parametrize("change", [
    {"secrets": [1]}, {"secrets": "GH"}, {"secrets": {"GH": {"hosts": 5}}}, {"secrets": {"GH": {"hosts": None}}},
    {"network": {"allow": 5}}, {"network": {"allow": None}}, {"network": {"allow": {"evil.test": 1}}},
    {"network": {"allow": [["evil.test:443"]]}}, {"network": {"allow": [{"host": "evil.test"}]}},
    {"network": {"allow": [443]}}, {"network": ["allow"]}, {"secrets": {"GH": "api.github.com"}},
])
def test_a_change_of_any_shape_is_measured_and_refused_not_failed(change):
    p = load("default").effective(overrides={**BASE, "secrets": {"GH": {"from_env": "X", "hosts": ["api.github.com"]}}})
    why = within_grant(p, change)  # (raised AttributeError / TypeError: a 500 to the tenant)
    if why is None:
        with pytest.raises(RunnerError):  # PolicyError is one: both answer 422
            p.effective(overrides=overrides(p, change))
