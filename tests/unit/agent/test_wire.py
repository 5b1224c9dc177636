"""The agent's channel, line by line (runner/agent/wire.py): each line's MAC covers its sequence
number and body, keyed BLAKE2b under SMALL_BODY bytes and HMAC-SHA256 from there. The forged
lines of a real sandbox are tests/integration/security/test_channel.py's."""
from __future__ import annotations

import hashlib
import hmac
import os

import pytest

from runner.agent import wire

SIZES = (0, 200, wire.SMALL_BODY - 1, wire.SMALL_BODY, 1 << 20)


def pair():
    key = wire.direction_key(os.urandom(32), wire.TO_AGENT)
    return wire.Signer(key), wire.Verifier(key), key


def body_of(size: int) -> dict:
    """A message whose encoded body is exactly size bytes (size 0: the smallest there is)."""
    base = len(wire.encode({"p": ""}))
    return {"p": "x" * max(0, size - base)}


@pytest.mark.parametrize("size", SIZES)
def test_lines_of_either_kind_open_in_order(size):
    tx, rx, _ = pair()
    msgs = [body_of(size), {"op": "n", "i": 1}, body_of(size)]
    lines = [tx.frame(m) for m in msgs]
    assert [rx.open(line[:-1]) for line in lines] == msgs


@pytest.mark.parametrize("size", SIZES)
def test_a_changed_replayed_or_reordered_line_is_refused(size):
    tx, rx, _ = pair()
    first, second = tx.frame(body_of(size))[:-1], tx.frame({"op": "n"})[:-1]
    changed = first[:-2] + (b"y" if first[-2:-1] != b"y" else b"z") + first[-1:]
    with pytest.raises(wire.WireError, match="failed authentication"):
        rx.open(changed)
    tx, rx, _ = pair()
    first, second = tx.frame(body_of(size))[:-1], tx.frame({"op": "n"})[:-1]
    with pytest.raises(wire.WireError, match="failed authentication"):
        rx.open(second)  # out of order
    tx, rx, _ = pair()
    first = tx.frame(body_of(size))[:-1]
    assert rx.open(first) == body_of(size)
    with pytest.raises(wire.WireError, match="failed authentication"):
        rx.open(first)  # replayed


@pytest.mark.parametrize("size", SIZES)
def test_a_mac_of_the_other_kind_or_key_is_refused(size):
    """A small body MAC'd as a large one is (HMAC-SHA256), a large one as a small one is (keyed
    BLAKE2b), either with the direction's key itself in BLAKE2b, or with the other direction's
    key, is not the line's MAC."""
    _, rx, key = pair()
    body = wire.encode(body_of(size))
    data = (0).to_bytes(8, "big") + body
    other = wire.direction_key(os.urandom(32), wire.FROM_AGENT)
    small_key = wire.Signer(key).small_key
    other_kind = (hmac.new(key, data, hashlib.sha256).hexdigest() if len(body) < wire.SMALL_BODY
                  else hashlib.blake2b(data, key=small_key, digest_size=32).hexdigest())
    forged = [other_kind, hashlib.blake2b(data, key=key, digest_size=32).hexdigest(),
              wire.Signer(other).frame_body(body).split(b" ", 1)[0].decode()]
    right = wire.Signer(key).frame_body(body).split(b" ", 1)[0].decode()
    assert right not in forged
    for mac in forged:
        with pytest.raises(wire.WireError, match="failed authentication"):
            rx.open(mac.encode() + b" " + body)
    assert rx.open(right.encode() + b" " + body) == body_of(size)
