"""An E2B upload sent gzip-encoded is inflated to at most one byte past the file cap (then 413):
a body of a few kilobytes that inflates to gigabytes never does so in the server's memory."""
from __future__ import annotations

import gzip

import pytest

pytest.importorskip("connectrpc")
from runner.servers.e2b.files import inflated  # noqa: E402


def test_a_gzip_bomb_is_inflated_no_further_than_the_cap():
    cap = 1 << 20
    bomb = gzip.compress(b"\0" * (64 * cap))
    assert len(bomb) < cap // 8
    assert len(inflated(bomb, cap)) == cap + 1  # one byte past: refused by the caller as over MAX_FILE


def test_a_body_under_the_cap_comes_back_whole_and_one_that_is_not_gzip_is_refused():
    assert inflated(gzip.compress(b"hello"), 1 << 20) == b"hello"
    with pytest.raises(ValueError, match="not gzip"):
        inflated(b"plain", 1 << 20)
