"""What a root `.gitignore` ignores: a useful subset of its syntax.

Supported: comments, blank lines, `!` negation (the last matching rule wins), a trailing `/`
for directories only, a leading or inner `/` anchoring the pattern at the root, `*`, `?`,
`[...]` and `**`. Not supported: nested .gitignore files, escaped trailing spaces.
"""
from __future__ import annotations

import os
import re
from typing import List, Tuple

from .globs import compile_glob

ALWAYS_SKIPPED = frozenset({".git", "node_modules"})


class Ignore:
    def __init__(self, text: str = "") -> None:
        self.rules: List[Tuple["re.Pattern[str]", bool, bool]] = []
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            if line.startswith("\\"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            line = line.lstrip("/")
            pattern = line if anchored else "**/" + line
            try:
                self.rules.append((compile_glob(pattern), negate, dir_only))
            except re.error:
                continue

    @classmethod
    def from_root(cls, root: str) -> "Ignore":
        try:
            with open(os.path.join(root, ".gitignore"), encoding="utf-8", errors="replace") as f:
                return cls(f.read(1 << 20))
        except OSError:
            return cls()

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """rel: the path from the root, with `/`; the last rule that matches decides."""
        result = False
        for rx, negate, dir_only in self.rules:
            if dir_only and not is_dir:
                continue
            if rx.match(rel):
                result = not negate
        return result
