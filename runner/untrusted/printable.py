"""Text from the workspace, the sandbox or a call, made safe to print for a person.

    printable(text)                 # one line: every control character escaped (\\n, \\x1b, \\u202e)
    printable(text, newlines=True)  # several lines: \\n and \\t kept, the rest escaped
    json_text(obj, indent=None)     # JSON that is one line (without indent) whatever a string holds

A newline in a call id forged a line of `runner audit tail`; ESC sequences in a tool's
description drove the terminal of whoever ran `runner tools`. Escaped here: C0 and C1 control
characters (ESC, CR, BEL, CSI 0x9b …), DEL, the Unicode line and paragraph separators (line
breaks for many readers) and the bidirectional overrides and isolates (they reorder what is
shown).
"""
from __future__ import annotations

import json
import re
from typing import Any

_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"  # json.dumps leaves these raw
_ONE_LINE = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")  # \t and \n kept
_JSON_RAW = re.compile(f"[{_BEYOND_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ONE_LINE_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # json_text's without indent, made once


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: Any, *, newlines: bool = False) -> str:
    """str(text) with control characters escaped; with newlines=True line breaks and tabs stay."""
    return (_LINES if newlines else _ONE_LINE).sub(_escape, str(text))


def json_text(obj: Any, indent: int | None = None) -> str:
    """json.dumps (UTF-8 kept) with the characters JSON leaves raw but terminals and line
    splitters act on written as \\u escapes: still the same JSON value, one line without indent."""
    text = (_ONE_LINE_JSON.encode(obj) if indent is None
            else json.dumps(obj, ensure_ascii=False, indent=indent, default=str))
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
