"""ls, read_dir, glob, find, grep."""
from __future__ import annotations

import fnmatch
import json
import os
import re

from . import paths
from .context import Ctx, ToolError
from .fsutil import looks_binary, walk

SKIP_DIRS = {".git", "node_modules"}
GLOB_MAX = 1000
LINE_MAX = 500


def _dir(ctx: Ctx, path) -> str:
    real = paths.resolve(ctx, path or ".")
    if not os.path.exists(real):
        raise ToolError(f"directory not found: {path}")
    if not os.path.isdir(real):
        raise ToolError(f"{path} is a file, not a directory: use read")
    return real


def _entries(real: str, show_hidden: bool):
    try:
        names = sorted(os.listdir(real))
    except PermissionError:
        return []
    return [n for n in names if show_hidden or not n.startswith(".")]


def ls(ctx: Ctx, args: dict):
    real = _dir(ctx, args.get("path"))
    depth = max(1, min(5, int(args.get("depth") or 1)))
    hidden = bool(args.get("show_hidden"))
    out: list[str] = []

    def walk(d: str, level: int, indent: str) -> None:
        for n in _entries(d, hidden):
            full = os.path.join(d, n)
            isdir = os.path.isdir(full) and not os.path.islink(full)
            out.append(f"{indent}{n}{'/' if isdir else ''}")
            if isdir and level < depth and len(out) < 5000:
                walk(full, level + 1, indent + "  ")

    walk(real, 1, "")
    if not out:
        return "(empty directory)"
    if len(out) >= 5000:
        out.append("[listing cut at 5000 entries: give a smaller depth or a subdirectory]")
    return "\n".join(out)


def read_dir(ctx: Ctx, args: dict):
    real = _dir(ctx, args.get("path"))
    items = []
    for n in _entries(real, bool(args.get("show_hidden", True))):
        full = os.path.join(real, n)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        kind = "symlink" if os.path.islink(full) else "dir" if os.path.isdir(full) else "file"
        items.append({"path": paths.display(ctx, full), "type": kind, "size": st.st_size})
    return json.dumps(items, ensure_ascii=False)


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob with ** (any number of directories), * and ? (never crossing /), [..] classes."""
    i, out = 0, []
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _walk_files(root: str, want_dirs: bool = False, skip=SKIP_DIRS):
    for dirpath, dirnames, filenames in walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        if want_dirs:
            for d in dirnames:
                yield os.path.join(dirpath, d), True
        for f in sorted(filenames):
            yield os.path.join(dirpath, f), False


def glob(ctx: Ctx, args: dict):
    pattern = args["pattern"]
    root = _dir(ctx, args.get("path"))
    rx = _glob_regex(pattern.lstrip("./") if pattern.startswith("./") else pattern)
    hits = []
    for full, _ in _walk_files(root):
        rel = os.path.relpath(full, root)
        if rx.match(rel):
            hits.append(paths.display(ctx, full))
    hits.sort()
    if not hits:
        return f"no files match {pattern}"
    cut = len(hits) > GLOB_MAX
    text = "\n".join(hits[:GLOB_MAX])
    if cut:
        text += f"\n[{len(hits)} files match; showing the first {GLOB_MAX}: narrow the pattern or the path]"
    return text


def find(ctx: Ctx, args: dict):
    pattern = args["pattern"]
    root = _dir(ctx, args.get("path"))
    kind = args.get("type")
    is_glob = any(ch in pattern for ch in "*?[")
    hits = []
    for full, isdir in _walk_files(root, want_dirs=True):
        if kind == "file" and isdir or kind == "dir" and not isdir:
            continue
        name = os.path.basename(full)
        if (fnmatch.fnmatch(name, pattern) if is_glob else pattern.lower() in name.lower()):
            hits.append(paths.display(ctx, full) + ("/" if isdir else ""))
            if len(hits) > GLOB_MAX:
                break
    if not hits:
        return f"nothing named like {pattern} found"
    text = "\n".join(sorted(hits[:GLOB_MAX]))
    if len(hits) > GLOB_MAX:
        text += f"\n[more than {GLOB_MAX} matches; showing {GLOB_MAX}: narrow the pattern]"
    return text


def _gitignore(root: str):
    """A matcher for the root .gitignore: a reasonable subset (globs, dir/ patterns, !negation, /anchors)."""
    rules = []
    try:
        with open(os.path.join(root, ".gitignore"), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n").rstrip()
                if not line or line.startswith("#"):
                    continue
                neg = line.startswith("!")
                line = line[1:] if neg else line
                dir_only = line.endswith("/")
                line = line.strip("/") if dir_only else line
                anchored = "/" in line.lstrip("/")
                pat = line.lstrip("/")
                rx = _glob_regex(pat if anchored else "**/" + pat)
                rules.append((rx, neg, dir_only))
    except OSError:
        pass

    def ignored(rel: str, isdir: bool) -> bool:
        result = False
        for rx, neg, dir_only in rules:
            if dir_only and not isdir:
                continue
            if rx.match(rel):
                result = not neg
        return result

    return ignored


def grep(ctx: Ctx, args: dict):
    pattern = args["pattern"]
    flags = re.IGNORECASE if args.get("ignore_case") else 0
    try:
        rx = re.compile(re.escape(pattern) if args.get("literal") else pattern, flags)
    except re.error as e:
        raise ToolError(f"bad regular expression {pattern!r}: {e}; set literal to search for the text itself") from None
    start = paths.resolve(ctx, args.get("path") or ".")
    if not os.path.exists(start):
        raise ToolError(f"path not found: {args.get('path')}")
    include, exclude = args.get("include"), args.get("exclude")
    ctx_lines = max(0, min(20, int(args.get("context") or 0)))
    limit = max(1, int(args.get("max_results") or 100))
    ignored = _gitignore(ctx.workspace)
    files = [(start, False)] if os.path.isfile(start) else []
    if not files:
        for dirpath, dirnames, filenames in walk(start):
            rel_dir = os.path.relpath(dirpath, ctx.workspace)
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and
                                 not ignored(os.path.normpath(os.path.join(rel_dir, d)), True))
            for f in sorted(filenames):
                full = os.path.join(dirpath, f)
                rel = os.path.normpath(os.path.relpath(full, ctx.workspace))
                if ignored(rel, False):
                    continue
                if include and not (fnmatch.fnmatch(f, include) or fnmatch.fnmatch(rel, include)):
                    continue
                if exclude and (fnmatch.fnmatch(f, exclude) or fnmatch.fnmatch(rel, exclude)):
                    continue
                files.append((full, False))
    files.sort()
    out, matches, cut = [], 0, False
    for full, _ in files:
        try:
            with open(full, "rb") as fh:
                data = fh.read(20 * 1024 * 1024)
        except OSError:
            continue
        if looks_binary(data[:8192]):
            continue
        lines = data.decode("utf-8", errors="replace").split("\n")
        if lines[-1] == "":  # the newline that ends the last line: no line follows it
            lines.pop()
        shown = paths.display(ctx, full)
        last_printed = -1
        for i, line in enumerate(lines):
            if not rx.search(line):
                continue
            matches += 1
            if matches > limit:
                cut = True
                break
            lo = max(0, i - ctx_lines, last_printed + 1)
            if ctx_lines and out and lo > last_printed + 1:
                out.append("--")
            for j in range(lo, min(len(lines), i + ctx_lines + 1)):
                if j <= last_printed:
                    continue
                if j > i and rx.search(lines[j]):
                    break  # the next match prints itself, as a match
                text = lines[j].rstrip("\r")
                if len(text) > LINE_MAX:
                    text = text[:LINE_MAX] + " [line cut]"
                out.append(f"{shown}{':' if j == i else '-'}{j + 1}{':' if j == i else '-'}{text}")
                last_printed = j
        if cut:
            break
    if not out:
        return "no matches found"
    text = "\n".join(out)
    if cut:
        text += f"\n[stopped at {limit} matches: narrow the pattern or raise max_results]"
    return text
