"""ls, read_dir, glob and find."""
from __future__ import annotations

import json
import os
from typing import Iterator, List, Optional, Tuple

from . import paths
from .globs import compile_glob, has_magic
from .ignore import ALWAYS_SKIPPED
from .result import Result, ToolError, error, ok

MAX_LS_ENTRIES = 1000
MAX_GLOB = 1000
MAX_SCAN = 200_000  # entries looked at before a search gives up


def _kind(entry: os.DirEntry) -> Tuple[str, int]:
    try:
        if entry.is_dir():
            return "dir", 0
        if entry.is_file():
            return ("symlink" if entry.is_symlink() else "file"), entry.stat().st_size
        return ("symlink" if entry.is_symlink() else "other"), 0
    except OSError:
        return "other", 0


def _scan(real: str) -> List[os.DirEntry]:
    try:
        with os.scandir(real) as it:
            return sorted(it, key=lambda e: e.name)
    except PermissionError:
        raise ToolError(f"permission denied listing {real}") from None
    except OSError as e:
        raise ToolError(f"cannot list {real}: {e.strerror}") from None


def _tree(real: str, depth: int, show_hidden: bool) -> Iterator[Tuple[str, str, int]]:
    """(path from `real`, type, size) in pre-order, each directory's entries sorted by name."""
    def walk(d: str, prefix: str, level: int) -> Iterator[Tuple[str, str, int]]:
        try:
            entries = _scan(d)
        except ToolError:
            if level == 1:
                raise
            return
        for e in entries:
            if not show_hidden and e.name.startswith("."):
                continue
            kind, size = _kind(e)
            rel = prefix + e.name
            yield rel, kind, size
            if kind == "dir" and level < depth and not e.is_symlink() and e.name not in ALWAYS_SKIPPED:
                yield from walk(e.path, rel + "/", level + 1)
    return walk(real, "", 1)


def _listed_dir(ctx, args) -> Tuple[str, str, int, bool]:
    raw = args.get("path") or "."
    real = paths.resolve(ctx, raw)
    shown = paths.show(ctx, real)
    if not os.path.exists(real):
        raise ToolError(f"directory not found: {raw}")
    if not os.path.isdir(real):
        raise ToolError(f"{shown} is a file, not a directory: use read to see it")
    depth = args.get("depth") or 1
    if not isinstance(depth, int) or not 1 <= depth <= 5:
        raise ToolError(f"depth must be from 1 to 5, got {depth!r}")
    return real, shown, depth, bool(args.get("show_hidden"))


def ls(ctx, args) -> Result:
    real, shown, depth, hidden = _listed_dir(ctx, args)
    out: List[str] = []
    more = 0
    for rel, kind, _size in _tree(real, depth, hidden):
        if len(out) >= MAX_LS_ENTRIES:
            more += 1
            continue
        out.append(rel + "/" if kind == "dir" else rel)
    if not out:
        return ok("(empty directory)", path=shown, entries=0)
    text = "\n".join(out)
    if more:
        text += f"\n\n[{more} more entries not shown; list a subdirectory or use a smaller depth]"
    return ok(text, path=shown, entries=len(out) + more)


def read_dir(ctx, args) -> Result:
    real, shown, depth, hidden = _listed_dir(ctx, args)
    entries = []
    more = 0
    for rel, kind, size in _tree(real, depth, hidden):
        if len(entries) >= MAX_LS_ENTRIES:
            more += 1
            continue
        entries.append({"path": rel, "type": kind, "size": size})
    body = {"path": shown, "entries": entries}
    if more:
        body["truncated"] = more
    return ok(json.dumps(body, ensure_ascii=False), path=shown, entries=len(entries) + more)


def _walk(root: str, want_dirs: bool, skip_special: bool = True) -> Iterator[Tuple[str, bool]]:
    """(path from root, is_dir) for everything under root; .git and node_modules skipped."""
    seen = 0
    stack = [("", root)]
    while stack:
        prefix, d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > MAX_SCAN:
                return
            try:
                is_dir = e.is_dir()
            except OSError:
                continue
            rel = prefix + e.name
            if is_dir:
                if skip_special and e.name in ALWAYS_SKIPPED:
                    continue
                if want_dirs:
                    yield rel, True
                if not e.is_symlink():
                    stack.append((rel + "/", e.path))
            else:
                yield rel, False


def _search_root(ctx, raw: Optional[str]) -> Tuple[str, str]:
    real = paths.resolve_dir(ctx, raw or ".")
    return real, paths.show(ctx, real)


def _joined(shown_root: str, rel: str) -> str:
    return rel if shown_root == "." else shown_root.rstrip("/") + "/" + rel


def glob(ctx, args) -> Result:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        return error("pattern is empty: give a glob such as `**/*.py`")
    real, shown = _search_root(ctx, args.get("path"))
    pattern = pattern.strip()
    if pattern.startswith("/"):
        base = real.rstrip("/") + "/"
        if pattern.startswith(base):
            pattern = pattern[len(base):]
        elif pattern.startswith(ctx.workspace_given.rstrip("/") + "/") and real == ctx.workspace:
            pattern = pattern[len(ctx.workspace_given.rstrip("/")) + 1:]
        else:
            return error(f"pattern {pattern} is absolute: give it relative to path ({shown})")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    rx = compile_glob(pattern)
    skip_special = not any(s in pattern for s in ALWAYS_SKIPPED)
    found = sorted(rel for rel, _d in _walk(real, False, skip_special) if rx.match(rel))
    if not found:
        return ok(f"no files match {pattern} in {shown}", matches=0)
    text = "\n".join(_joined(shown, r) for r in found[:MAX_GLOB])
    if len(found) > MAX_GLOB:
        text += f"\n\n[showing {MAX_GLOB} of {len(found)} matches; narrow the pattern or the path]"
    return ok(text, matches=len(found))


def find(ctx, args) -> Result:
    pattern = args.get("pattern") or ""
    kind = args.get("type") or None
    if kind not in (None, "file", "dir"):
        return error(f"type must be file or dir, got {kind!r}")
    limit = args.get("max_results") or 200
    real, shown = _search_root(ctx, args.get("path"))
    if has_magic(pattern):
        rx = compile_glob(pattern)
        on_path = "/" in pattern

        def hit(rel: str) -> bool:
            return bool(rx.match(rel if on_path else rel.rsplit("/", 1)[-1]))
    else:
        needle = pattern.lower()

        def hit(rel: str) -> bool:
            return needle in rel.rsplit("/", 1)[-1].lower()
    found = []
    for rel, is_dir in _walk(real, kind != "file"):
        if kind == "dir" and not is_dir:
            continue
        if hit(rel):
            found.append(rel + "/" if is_dir else rel)
    found.sort()
    what = {None: "files or directories", "file": "files", "dir": "directories"}[kind]
    if not found:
        return ok(f"no {what} match {pattern!r} in {shown}" if pattern else f"no {what} in {shown}", matches=0)
    text = "\n".join(_joined(shown, r) for r in found[:limit])
    if len(found) > limit:
        text += f"\n\n[showing {limit} of {len(found)} matches; narrow the pattern or raise max_results]"
    return ok(text, matches=len(found))
