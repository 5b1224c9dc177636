"""echo, get_time, memory_search and memory_get."""
from __future__ import annotations

import datetime
import math
import os
import re
from typing import Dict, List, Tuple

from . import paths
from .result import Result, error, ok

ECHO_MAX = 10_000
MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
CHUNK_LINES = 12
MAX_MEMORY_FILES = 2000
_WORD = re.compile(r"[\w][\w'-]*", re.UNICODE)


def echo(ctx, args) -> Result:
    text = args.get("text")
    if not isinstance(text, str):
        return error("echo needs text: a string")
    if len(text) > ECHO_MAX:
        return error(f"text is {len(text)} characters, over echo's limit of {ECHO_MAX}")
    return ok(text)


def get_time(ctx, args) -> Result:
    now = datetime.datetime.now(datetime.timezone.utc)
    return ok(now.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (now.microsecond // 1000), epoch=now.timestamp())


# -- memory ---------------------------------------------------------------------------------
def _memory_files(ctx) -> List[str]:
    """MEMORY.md and memory/**/*.md of the workspace (real paths, inside the workspace)."""
    out = []
    top = os.path.join(ctx.workspace, MEMORY_FILE)
    if os.path.isfile(top):
        out.append(top)
    base = os.path.join(ctx.workspace, MEMORY_DIR)
    if os.path.isdir(base):
        for root, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in sorted(files):
                if f.endswith(".md"):
                    out.append(os.path.join(root, f))
                if len(out) >= MAX_MEMORY_FILES:
                    break
    return [p for p in out if paths.inside(os.path.realpath(p), ctx.workspace)]


def _words(text: str) -> List[str]:
    return [w.lower().strip("'-") for w in _WORD.findall(text) if len(w) > 1 or w.isdigit()]


def _chunks(lines: List[str]) -> List[Tuple[int, int]]:
    """(first, last) 1-based line ranges: paragraphs, long ones split every CHUNK_LINES."""
    out, start = [], None
    for n, line in enumerate(lines, 1):
        heading = line.startswith("#")
        if not line.strip() or heading:
            if start is not None:
                out.append((start, n - 1))
                start = None
            if heading:
                start = n
            continue
        if start is None:
            start = n
        elif n - start >= CHUNK_LINES:
            out.append((start, n - 1))
            start = n
    if start is not None:
        out.append((start, len(lines)))
    return out


def memory_search(ctx, args) -> Result:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return error("query is empty: give the words to look for in memory")
    limit = int(args.get("max_results") or 6)
    min_score = float(args.get("min_score") if args.get("min_score") is not None else 0.35)
    files = _memory_files(ctx)
    if not files:
        return ok(f"no memory files: neither {MEMORY_FILE} nor {MEMORY_DIR}/*.md exists in the workspace", results=0)
    terms = list(dict.fromkeys(_words(query)))
    if not terms:
        return error("query has no words to search for")
    docs: List[Tuple[str, int, int, List[str], Dict[str, int]]] = []
    df: Dict[str, int] = {}
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read(4 << 20).split("\n")
        except OSError:
            continue
        for a, b in _chunks(lines):
            counts: Dict[str, int] = {}
            for w in _words("\n".join(lines[a - 1:b])):
                counts[w] = counts.get(w, 0) + 1
            for t in set(terms) & set(counts):
                df[t] = df.get(t, 0) + 1
            docs.append((path, a, b, lines[a - 1:b], counts))
    n_docs = max(1, len(docs))
    idf = {t: math.log(1 + n_docs / (1 + df.get(t, 0))) + 1 for t in terms}
    total = sum(idf.values())
    scored = []
    for path, a, b, text, counts in docs:
        hit = sum(idf[t] for t in terms if t in counts)
        if not hit:
            continue
        phrase = 0.1 if query.strip().lower() in "\n".join(text).lower() else 0.0
        score = min(1.0, hit / total + phrase)
        if score >= min_score:
            scored.append((score, path, a, b, text))
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    if not scored:
        return ok(f"no memory matches {query.strip()!r} with score ≥ {min_score:g} (searched {len(files)} "
                  f"file{'s' if len(files) != 1 else ''})", results=0)
    out = []
    for score, path, a, b, text in scored[:limit]:
        snippet = "\n".join(text).strip()
        if len(snippet) > 700:
            snippet = snippet[:700] + "…"
        out.append(f"{paths.show(ctx, path)}:{a}-{b} (score {score:.2f})\n{snippet}")
    return ok("\n\n".join(out), results=min(limit, len(scored)))


def memory_get(ctx, args) -> Result:
    raw = args.get("path")
    real = paths.resolve(ctx, raw)
    rel = paths.show(ctx, real)
    if not (rel == MEMORY_FILE or (rel.startswith(MEMORY_DIR + "/") and rel.endswith(".md"))):
        return error(f"memory_get reads {MEMORY_FILE} and {MEMORY_DIR}/*.md only, not {raw}; use read for other files")
    if not os.path.isfile(real):
        return error(f"memory file not found: {rel}")
    start = int(args.get("from") or 1)
    count = args.get("lines")
    with open(real, encoding="utf-8", errors="replace") as f:
        lines = f.read(4 << 20).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if start > len(lines):
        return error(f"from {start} is past the end of {rel}: it has {len(lines)} lines")
    end = len(lines) if not count else min(len(lines), start + int(count) - 1)
    return ok("\n".join(lines[start - 1:end]), path=rel, first_line=start, last_line=end, total_lines=len(lines))
