"""Approval of tools marked needsApproval: deny, allow, or ask on a terminal."""
from __future__ import annotations

import io

import pytest

from runner.policy.approval import decide
from runner.reporting.redact import Redactor


def test_allow_and_deny():
    assert decide("allow", "deploy").approved
    d = decide("deny", "deploy", {"x": 1})
    assert not d.approved and "tool deploy needs approval" in d.message and "approval: deny" in d.message


def test_ask_without_tty_denies_clearly():
    out = io.StringIO()
    d = decide("ask", "deploy", {}, stdin=io.StringIO("y\n"), stderr=out)  # StringIO is not a TTY
    assert not d.approved and "stdin is not a TTY" in d.message
    assert out.getvalue() == ""  # nothing asked, nothing read


@pytest.mark.parametrize("answer, ok", [("y\n", True), ("YES\n", True), ("n\n", False), ("\n", False), ("", False),
                                        ("yep\n", False)])
def test_ask_on_tty(answer, ok):
    out = io.StringIO()
    d = decide("ask", "deploy", {"env": "prod"}, stdin=io.StringIO(answer), stderr=out, is_tty=lambda: True)
    assert d.approved is ok
    assert "tool deploy needs approval" in out.getvalue() and '"env": "prod"' in out.getvalue()
    if not ok:
        assert "not approved" in d.message


def test_ask_preview_is_redacted_and_short():
    out = io.StringIO()
    token = "ghp_" + "a1" * 18
    decide("ask", "t", {"token": token, "blob": "x" * 5000}, stdin=io.StringIO("n\n"), stderr=out,
           is_tty=lambda: True, redact=Redactor().redact)
    text = out.getvalue()
    assert token not in text and "[REDACTED:github-token]" in text and len(text) < 500


def test_unknown_rule():
    with pytest.raises(ValueError):
        decide("maybe", "t")
