"""JSON from untrusted input, bounded: one line at a time, its size and its nesting.

    for n, line in lines(sys.stdin.buffer, MAX_LINE_BYTES): ...   # line is None when too long
    obj = loads(text)                                             # ValueError with a clear message

Python's json parser recurses: a line of 100,000 `[` raised RecursionError, which ended
`runner session`. Here nesting deeper than MAX_DEPTH, invalid JSON and invalid UTF-8 are all a
ValueError that names the problem, so a caller answers an error for that input and goes on.
"""
from __future__ import annotations

import json
from typing import Any, BinaryIO, Iterator

MAX_DEPTH = 64  # arrays and objects inside one another; tool arguments need a handful


def depth(obj: Any, stop_after: int | None = None) -> int:
    """How deeply lists and dicts nest in obj (0 for a scalar), walked without recursion;
    stops counting once past stop_after."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, (list, tuple)):
            continue
        deepest = max(deepest, d)
        if stop_after is not None and deepest > stop_after:
            break
        stack.extend((v, d + 1) for v in x)
    return deepest


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads that never raises anything but ValueError (and says why)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested too deeply (more than {max_depth} levels of arrays and objects)") from None
    except ValueError as e:
        msg = getattr(e, "msg", None)
        raise ValueError(f"not valid JSON ({msg} at column {e.colno})" if msg else f"not valid JSON ({e})") from None
    if depth(obj, stop_after=max_depth) > max_depth:
        raise ValueError(f"JSON nested too deeply (more than {max_depth} levels of arrays and objects)")
    return obj


def lines(stream: BinaryIO, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) for each line of a binary stream; None for a line longer than
    max_bytes, whose rest is read and dropped (memory stays bounded by max_bytes)."""
    n = 0
    while True:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        n += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = stream.readline(1 << 20)
            yield n, None
            continue
        yield n, line
