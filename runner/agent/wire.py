"""The protocol's framing, the same code on both ends: one JSON message per line, each line
authenticated, every line bounded.

Processes in the sandbox are hostile and may reach the agent's pipes (docker-init holds the
container's stdio; gVisor lets a same-uid process open /proc/PID/fd/* of any process). So after
the hello, which carries a fresh random key, every line is `MAC BODY\n`: MAC is 32 bytes in hex
over the line's sequence number and its body, with one key per direction: keyed BLAKE2b for a
body under SMALL_BODY bytes, HMAC-SHA256 for a longer one. A line written, replayed, dropped or
stolen by anything but the other end breaks the chain, and the reader stops trusting the
channel: the controller replaces the sandbox, the agent exits.

The short MACs and the keys come from the interpreter's builtin BLAKE2b and SHA-256 (`_blake2`,
`_sha256` or `_sha2`): `hashlib` and `hmac` load OpenSSL's libcrypto, 2-4 ms of every sandbox's
start and 0.6 MiB of its memory (runner/base, measured), which the agent now loads only for its
first long body, where OpenSSL's SHA-256 is what a flood of output needs.
"""
from __future__ import annotations

import json

try:
    from _blake2 import blake2b as _blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b as _blake2b
try:
    from _operator import _compare_digest as compare_digest  # what hmac.compare_digest is
except ImportError:
    from hmac import compare_digest


def _builtin_sha256():
    for name in ("_sha256", "_sha2"):  # (3.12 renamed it)
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            pass
    from hashlib import sha256

    return sha256


_sha256 = _builtin_sha256()
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104), as hmac.new(key, data, hashlib.sha256).digest(), from the builtin
    SHA-256: for the keys and other short data (OpenSSL's is faster from a few KiB on)."""
    if len(key) > 64:
        key = _sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = _sha256(key.translate(_IPAD))
    inner.update(data)
    outer = _sha256(key.translate(_OPAD))
    outer.update(inner.digest())
    return outer.digest()


_long_mac = None


def _hmac_hex(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA256 in hex through OpenSSL (hmac.digest), loaded on first use."""
    global _long_mac
    if _long_mac is None:
        import hmac

        _long_mac = hmac.digest
    return _long_mac(key, data, "sha256").hex().encode()

MAX_LINE = 64 * 1024 * 1024  # bytes of one line either way; the largest result the agent sends
MAC_HEX = 64
# Bodies shorter than this get a keyed BLAKE2b MAC, longer ones HMAC-SHA256. Each end's first MAC
# after a pause is what a call pays (four of them on its path): there BLAKE2b took 22-29 us and
# HMAC-SHA256 (OpenSSL) 62-72 us, cold (a 200-byte body, 50 ms after the last); warm 0.8 against
# 1.7 us. From ~4 KiB SHA-NI is ahead (64 KiB: 38 against 70 us), which a flood of output is made of.
# The agent's first long body also imports hmac and loads libcrypto then, once: ~4 ms.
SMALL_BODY = 4096
TO_AGENT, FROM_AGENT = b"controller->agent", b"agent->controller"


class WireError(Exception):
    """The channel cannot be trusted any more: a line failed authentication, or was too long
    or not a JSON object."""


def direction_key(key: bytes, direction: bytes) -> bytes:
    return hmac_sha256(key, direction)


_ENCODER = json.JSONEncoder(ensure_ascii=False)  # json.dumps(msg, ensure_ascii=False), less the encoder it makes a call


def encode(msg: dict) -> bytes:
    """A message's body on the wire (before its MAC)."""
    return _ENCODER.encode(msg).encode("utf-8", "replace")


class _Chain:
    """The MACs of one direction's lines, in order: seq is the next line's number."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.small_key = hmac_sha256(key, b"blake2b")  # its own key for BLAKE2b
        self.seq = 0

    def _mac(self, body: bytes) -> bytes:
        data = self.seq.to_bytes(8, "big") + body
        if len(body) < SMALL_BODY:
            return _blake2b(data, key=self.small_key, digest_size=32).hexdigest().encode()
        return _hmac_hex(self.key, data)


class Signer(_Chain):
    """Frames outgoing messages of one direction. Callers serialise calls to frame() and the
    write of its line (the sequence number is the order on the wire)."""

    def frame(self, msg: dict) -> bytes:
        return self.frame_body(encode(msg))

    def frame_body(self, body: bytes) -> bytes:
        mac = self._mac(body)
        self.seq += 1
        return mac + b" " + body + b"\n"


class Verifier(_Chain):
    """Checks incoming lines of one direction, in order."""

    def open(self, line: bytes) -> dict:
        """The message of one line (without its newline); WireError if it is not the next
        authentic line of this channel."""
        mac, sep, body = line.partition(b" ")
        if not sep or len(mac) != MAC_HEX:
            raise WireError(f"line {self.seq} is not framed (no MAC; {len(line)} bytes)")
        if not compare_digest(mac, self._mac(body)):
            raise WireError(f"line {self.seq} failed authentication: it was written, replayed or reordered by "
                            "something other than the other end, or a line before it was stolen")
        self.seq += 1
        try:
            msg = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise WireError(f"line {self.seq - 1} is not JSON: {type(e).__name__}") from None
        if not isinstance(msg, dict):
            raise WireError(f"line {self.seq - 1} is not a JSON object")
        return msg


class LineBuffer:
    """Splits a byte stream into lines of at most max_line bytes. Each byte is scanned for the
    newline once, however the stream is chunked; a longer line raises WireError as soon as the
    buffer passes the bound, so memory stays within max_line plus one chunk."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self.buf = bytearray()
        self.scanned = 0

    def feed(self, data: bytes) -> None:
        self.buf += data

    def pop(self) -> bytes | None:
        """The next complete line (without its newline), or None until one is complete."""
        nl = self.buf.find(b"\n", self.scanned)
        if nl < 0:
            self.scanned = len(self.buf)
            if self.scanned > self.max_line:
                size = self.scanned
                self.buf = bytearray()
                self.scanned = 0
                raise WireError(f"a line of more than {self.max_line} bytes ({size} so far, no newline)")
            return None
        if nl > self.max_line:
            self.buf = bytearray()
            self.scanned = 0
            raise WireError(f"a line of {nl} bytes, over the bound of {self.max_line}")
        line = bytes(self.buf[:nl])
        del self.buf[: nl + 1]
        self.scanned = 0
        return line
