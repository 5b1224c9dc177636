"""Glob patterns with `**` and `{a,b}`, compiled to regular expressions over `/` paths."""
from __future__ import annotations

import functools
import re
from typing import List


def expand_braces(pattern: str) -> List[str]:
    """`*.{ts,tsx}` -> [`*.ts`, `*.tsx`] (nested braces too; an unclosed brace is literal)."""
    depth = 0
    start = -1
    for i, c in enumerate(pattern):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1:i]
                parts, level, cur = [], 0, ""
                for ch in inner:
                    if ch == "," and level == 0:
                        parts.append(cur)
                        cur = ""
                        continue
                    level += ch == "{"
                    level -= ch == "}"
                    cur += ch
                parts.append(cur)
                if len(parts) < 2:
                    continue
                out = []
                for p in parts:
                    out.extend(expand_braces(pattern[:start] + p + pattern[i + 1:]))
                return out
    return [pattern]


def _translate(pat: str) -> str:
    i, n, out = 0, len(pat), []
    while i < n:
        c = pat[i]
        if c == "*":
            if pat[i:i + 2] == "**":
                at_start = i == 0 or pat[i - 1] == "/"
                j = i + 2
                if at_start and j < n and pat[j] == "/":
                    out.append("(?:.*/)?")  # **/ : zero or more directories
                    i = j + 1
                    continue
                if at_start and j == n:
                    out.append(".*")
                    i = j
                    continue
                out.append(".*")
                i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 2 if pat[i + 1:i + 2] in ("!", "^") else i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: str) -> "re.Pattern[str]":
    alts = [_translate(p) for p in expand_braces(pattern)]
    return re.compile("(?s:" + "|".join("(?:%s)" % a for a in alts) + r")\Z")


def match(pattern: str, path: str) -> bool:
    """Whole-path match: `*` stays within one directory, `**` crosses any number."""
    return compile_glob(pattern).match(path) is not None


def has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[{")
