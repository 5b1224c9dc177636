"""echo, get_time, memory_search, memory_get."""
from __future__ import annotations

import math
import os
import re
import time

from . import paths
from .context import Ctx, ToolError
from .fsutil import walk


def echo(ctx: Ctx, args: dict):
    return args.get("text", "")


def get_time(ctx: Ctx, args: dict):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # (datetime: 1.7 ms of every sandbox's start)


def _memory_files(ctx: Ctx) -> list:
    out = []
    top = os.path.join(ctx.workspace, "MEMORY.md")
    if os.path.isfile(top):
        out.append(top)
    d = os.path.join(ctx.workspace, "memory")
    if os.path.isdir(d):
        for dirpath, _, files in walk(d):
            out += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".md")]
    return [f for f in out if os.path.realpath(f).startswith(ctx.workspace)]


_WORD = re.compile(r"[\w-]+", re.UNICODE)


def memory_search(ctx: Ctx, args: dict):
    """Lexical ranking (BM25 over paragraphs) of MEMORY.md and memory/*.md."""
    terms = [t.lower() for t in _WORD.findall(args["query"])]
    if not terms:
        raise ToolError("query has no words to search for")
    limit = max(1, min(50, int(args.get("max_results") or 5)))
    min_score = float(args.get("min_score") or 0.0)
    docs = []
    for f in _memory_files(ctx):
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        start = 0
        for i in range(len(lines) + 1):
            if i == len(lines) or not lines[i].strip():
                if i > start:
                    docs.append((f, start + 1, i, "\n".join(lines[start:i])))
                start = i + 1
    if not docs:
        return "no memory files (MEMORY.md or memory/*.md) in the workspace"
    tokenised = [[w.lower() for w in _WORD.findall(d[3])] for d in docs]
    avg = sum(len(t) for t in tokenised) / len(tokenised) or 1
    n = len(docs)
    scored = []
    for d, toks in zip(docs, tokenised, strict=True):
        score = 0.0
        for term in set(terms):
            tf = toks.count(term)
            if not tf:
                continue
            df = sum(1 for t in tokenised if term in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(toks) / avg))
        if score > min_score:
            scored.append((score, d))
    scored.sort(key=lambda x: -x[0])
    if not scored:
        return f"no memory matches {args['query']!r}"
    out = []
    for score, (f, a, b, text) in scored[:limit]:
        snippet = text if len(text) <= 400 else text[:400] + "…"
        out.append(f"{paths.display(ctx, f)}:{a}-{b} (score {score:.2f})\n{snippet}")
    return "\n\n".join(out)


def memory_get(ctx: Ctx, args: dict):
    real = paths.resolve(ctx, args["path"])
    rel = paths.display(ctx, real)
    if not (rel == "MEMORY.md" or (rel.startswith("memory/") and rel.endswith(".md"))):
        raise ToolError(f"memory_get reads MEMORY.md and memory/*.md only, not {args['path']}")
    if not os.path.isfile(real):
        raise ToolError(f"memory file not found: {args['path']}")
    with open(real, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    start = max(1, int(args.get("from") or 1))
    count = int(args.get("lines") or len(lines))
    chunk = lines[start - 1:start - 1 + count]
    return "\n".join(chunk) if chunk else f"line {start} is past the end: {rel} has {len(lines)} lines"
