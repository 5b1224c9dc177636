"""grep: Python regular expressions over the workspace's text files."""
from __future__ import annotations

import collections
import os
import re
from typing import Callable, List, Optional, Tuple

from . import fsutil, paths
from .globs import compile_glob
from .ignore import ALWAYS_SKIPPED, Ignore
from .result import Result, error, ok

LINE_MAX = 500
MAX_FILES = 100_000


def _filter(pattern: Optional[str]) -> Optional[Callable[[str], bool]]:
    if not pattern:
        return None
    rxs = [compile_glob(p.strip()) for p in pattern.split(",") if p.strip()] if "{" not in pattern \
        else [compile_glob(pattern)]
    on_path = "/" in pattern

    def test(rel: str) -> bool:
        subject = rel if on_path else rel.rsplit("/", 1)[-1]
        return any(rx.match(subject) for rx in rxs)
    return test


def _files(root: str, ws: str, ignore: Ignore) -> List[str]:
    """Files under root, sorted, skipping .git, node_modules and what .gitignore ignores."""
    found: List[str] = []
    stack = [root]
    while stack and len(found) < MAX_FILES:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = e.is_file()
            except OSError:
                continue
            rel_ws = e.path[len(ws) + 1:] if paths.inside(e.path, ws) else None
            if is_dir:
                if e.name not in ALWAYS_SKIPPED and not (rel_ws is not None and ignore.ignored(rel_ws, True)):
                    stack.append(e.path)
            elif is_file and not (rel_ws is not None and ignore.ignored(rel_ws, False)):
                found.append(e.path)
    return sorted(found)


def _cut(line: str) -> str:
    return line if len(line) <= LINE_MAX else line[:LINE_MAX] + f"… [cut at {LINE_MAX} characters]"


def _search(path: str, shown: str, rx: "re.Pattern[str]", context: int, budget: int,
            out: List[str]) -> Tuple[int, bool]:
    """Append the matches of one file to out; (matching lines, stopped at the budget?)."""
    try:
        f = open(path, "rb")
    except OSError:
        return 0, False
    found = 0
    with f:
        if fsutil.looks_binary(f.read(fsutil.TEXT_SAMPLE)):
            return 0, False
        f.seek(0)
        before: "collections.deque[Tuple[int, str]]" = collections.deque(maxlen=context or 1)
        after = 0
        last_printed = 0
        for n, raw in enumerate(f, 1):
            line = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
            if rx.search(line):
                if found >= budget:
                    return found, True
                found += 1
                if context:
                    first = before[0][0] if before else n
                    if last_printed and first > last_printed + 1:
                        out.append("--")
                    for bn, bl in before:
                        out.append(f"{shown}-{bn}-{_cut(bl)}")
                    before.clear()
                out.append(f"{shown}:{n}:{_cut(line)}")
                last_printed = n
                after = context
            elif after:
                out.append(f"{shown}-{n}-{_cut(line)}")
                last_printed = n
                after -= 1
            elif context:
                before.append((n, line))
    return found, False


def grep(ctx, args) -> Result:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or pattern == "":
        return error("pattern is empty: give a regular expression (or text with literal true)")
    flags = re.IGNORECASE if args.get("ignore_case") else 0
    try:
        rx = re.compile(re.escape(pattern) if args.get("literal") else pattern, flags)
    except re.error as e:
        return error(f"invalid regular expression {pattern!r}: {e}. Escape special characters, or set literal "
                     f"to true to search for the text as it is")
    context = int(args.get("context") or 0)
    limit = int(args.get("max_results") or 100)
    include = _filter(args.get("include"))
    exclude = _filter(args.get("exclude"))
    raw = args.get("path") or "."
    real = paths.resolve(ctx, raw)
    if not os.path.exists(real):
        return error(f"path not found: {raw}")
    if os.path.isdir(real):
        files = _files(real, ctx.workspace, Ignore.from_root(ctx.workspace))
    else:
        files = [real]
    out: List[str] = []
    total = 0
    stopped = False
    searched = 0
    for path in files:
        if path != real:
            rel = path[len(real) + 1:]
            if include is not None and not include(rel):
                continue
            if exclude is not None and exclude(rel):
                continue
        if total >= limit:  # at the limit: only look whether anything is left
            if _search(path, "", rx, 0, 0, [])[1]:
                stopped = True
                break
            continue
        searched += 1
        start = len(out)
        n, stopped = _search(path, paths.show(ctx, path), rx, context, limit - total, out)
        if n and context and start:
            out.insert(start, "--")
        total += n
        if stopped:
            break
    if not total:
        return ok("no matches found", matches=0, files_searched=searched)
    text = "\n".join(out)
    if stopped:
        text += f"\n\n[stopped at {limit} matches; narrow the pattern or path, or raise max_results]"
    return ok(text, matches=total, truncated=stopped)

