"""read, write, edit."""
from __future__ import annotations

import binascii
import os
import stat

from . import paths
from .context import Ctx, ToolError
from .fsutil import IMAGE_TYPES, atomic_write, decode, encode, looks_binary

PAGE_LINES = 2000
PAGE_BYTES = 50 * 1024
MAX_IMAGE = 10 * 1024 * 1024


def _existing_file(ctx: Ctx, path: str) -> str:
    real = paths.resolve(ctx, path)
    if not os.path.exists(real):
        parent = os.path.dirname(real)
        near = []
        if os.path.isdir(parent):
            base = os.path.basename(real).lower()
            near = [n for n in sorted(os.listdir(parent)) if base[:3] and n.lower().startswith(base[:3])][:5]
        hint = f"; similar names here: {', '.join(near)}" if near else "; use ls or glob to find it"
        raise ToolError(f"file not found: {path}{hint}")
    if os.path.isdir(real):
        raise ToolError(f"{path} is a directory: use ls to list it")
    if not stat.S_ISREG(os.stat(real).st_mode):  # a fifo's open waits for a writer: the whole call's timeout
        raise ToolError(f"{path} is not a regular file (a fifo, socket or device): inspect it with bash")
    return real


def read(ctx: Ctx, args: dict):
    path = args["path"]
    real = _existing_file(ctx, path)
    size = os.path.getsize(real)
    ext = os.path.splitext(real)[1].lower()
    if ext in IMAGE_TYPES:
        if size > MAX_IMAGE:
            raise ToolError(f"{path} is an image of {size} bytes, over the {MAX_IMAGE} byte limit")
        with open(real, "rb") as f:
            data = binascii.b2a_base64(f.read(), newline=False).decode("ascii")  # base64.b64encode
        return [{"type": "text", "text": f"image {paths.display(ctx, real)} ({size} bytes)"},
                {"type": "image", "data": data, "media_type": IMAGE_TYPES[ext]}]
    with open(real, "rb") as f:
        head = f.read(8192)
        if looks_binary(head):
            raise ToolError(f"{path} is a binary file ({size} bytes): read shows text only; inspect it with "
                            f"bash (for example: xxd {path} | head)")
        if args.get("raw"):
            return _raw(head + f.read(max(0, min(int(args.get("max_bytes") or PAGE_BYTES), PAGE_BYTES) - len(head))),
                        size, int(args.get("max_bytes") or PAGE_BYTES))
        data = head + f.read()
    if not data:
        return "(empty file)"
    text = data.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    offset = int(args.get("offset") or 1)
    limit = int(args.get("limit") or PAGE_LINES)
    if offset < 1:
        raise ToolError("offset is 1-based: use 1 for the first line")
    if offset > total:
        raise ToolError(f"offset {offset} is past the end: {path} has {total} line{'s' if total != 1 else ''}")
    out, used, n = [], 0, offset - 1
    for n in range(offset - 1, min(total, offset - 1 + limit)):
        line = lines[n].rstrip("\r")
        if len(line.encode("utf-8", "replace")) > PAGE_BYTES:
            if not out:
                raise ToolError(f"line {n + 1} of {path} is {len(line)} characters long, longer than a page: "
                                f"read part of it with bash, e.g. sed -n '{n + 1}p' {path} | cut -c1-2000")
            n -= 1
            break
        entry = f"{n + 1:6}\t{line}"
        if used + len(entry) + 1 > PAGE_BYTES and out:
            n -= 1
            break
        out.append(entry)
        used += len(entry) + 1
    last = n + 1
    body = "\n".join(out)
    if last < total:
        body += (f"\n\n[showing lines {offset}-{last} of {total}; continue with offset {last + 1}]")
    return body


def _raw(data: bytes, size: int, want: int) -> dict:
    """read with raw: the first bytes as text, with the file's size and what was read."""
    data = data[:min(want, PAGE_BYTES)]
    return {"content": data.decode("utf-8", errors="replace"),
            "meta": {"bytes": size, "read_bytes": len(data), "truncated": len(data) < size}}


def write(ctx: Ctx, args: dict):
    path, content = args["path"], args.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    data = content.encode("utf-8")
    if len(data) > ctx.max_write:
        raise ToolError(f"content is {len(data)} bytes, over the policy's largest write of {ctx.max_write} bytes: "
                        "write it in parts, or generate it with bash")
    real = paths.resolve(ctx, path, write=True)
    if os.path.isdir(real):
        raise ToolError(f"{path} is a directory: give a file path")
    try:
        atomic_write(real, data, replace=args.get("overwrite", True) is not False)
    except FileExistsError:
        raise ToolError(f"{path} exists and overwrite is false: nothing was written; set overwrite to true to "
                        "replace it") from None
    shown = paths.display(ctx, real)
    return {"content": f"wrote {len(data)} bytes to {shown}", "meta": {"bytes": len(data), "path": shown}}


# -- edit -----------------------------------------------------------------------------------------
_LOOSE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"',
                        "\u201e": '"', "\u201f": '"', "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-",
                        "\u2014": "-", "\u2015": "-", "\u2212": "-", "\u00a0": " ", "\u2007": " ", "\u202f": " "})


def _tolerant(text: str, old: str):
    """(start, end) of the one place where `old` matches `text` up to quotes, dashes, non-breaking
    spaces and trailing spaces; None when there is no such place or more than one."""
    loose_text, loose_old = text.translate(_LOOSE), old.translate(_LOOSE)
    if loose_text.count(loose_old) == 1:
        i = loose_text.index(loose_old)
        return i, i + len(old)
    t_lines = loose_text.split("\n")
    o_lines = loose_old.split("\n")
    if o_lines and o_lines[-1] == "":
        o_lines.pop()
    if not o_lines:
        return None
    want = [x.rstrip() for x in o_lines]
    hits = []
    for i in range(len(t_lines) - len(want) + 1):
        if [x.rstrip() for x in t_lines[i:i + len(want)]] == want:
            hits.append(i)
            if len(hits) > 1:
                return None
    if len(hits) != 1:
        return None
    start = sum(len(x) + 1 for x in t_lines[:hits[0]])
    end = start + sum(len(x) + 1 for x in t_lines[hits[0]:hits[0] + len(want)])
    if not old.endswith("\n"):
        end -= 1
    return start, min(end, len(text))


def apply_edits(text: str, edits: list, shown: str):
    """Apply edits in order; all or nothing. Returns (new text, replacements, tolerant used)."""
    count, loose = 0, False
    for k, e in enumerate(edits, 1):
        where = f"edit {k} of {len(edits)}: " if len(edits) > 1 else ""
        old, new = e.get("old_string"), e.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolError(f"{where}old_string and new_string must be strings")
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == "":
            raise ToolError(f"{where}old_string is empty: to create or replace a whole file use write")
        if old == new:
            raise ToolError(f"{where}old_string and new_string are the same: nothing would change")
        n = text.count(old)
        if n == 0:
            span = _tolerant(text, old)
            if span is None:
                first = old.strip().split("\n")[0][:80]
                raise ToolError(f"{where}old_string not found in {shown}: check whitespace and indentation, and "
                                f"read the file again for its current text (first line sought: {first!r})")
            text = text[:span[0]] + new + text[span[1]:]
            count += 1
            loose = True
        elif n > 1 and not e.get("replace_all"):
            raise ToolError(f"{where}old_string found {n} times in {shown}: include more surrounding lines to make "
                            "it unique, or set replace_all to change every one")
        else:
            text = text.replace(old, new) if e.get("replace_all") else text.replace(old, new, 1)
            count += n if e.get("replace_all") else 1
    return text, count, loose


def edit(ctx: Ctx, args: dict):
    path = args["path"]
    edits = args.get("edits") or [{"old_string": args.get("old_string"), "new_string": args.get("new_string"),
                                   "replace_all": args.get("replace_all", False)}]
    real = _existing_file(ctx, path)
    paths.resolve(ctx, path, write=True)
    with open(real, "rb") as f:
        data = f.read()
    if looks_binary(data[:8192]):
        raise ToolError(f"{path} is a binary file: edit changes text files only")
    text, bom, newline = decode(data)
    base = text.replace("\r\n", "\n")
    new_text, count, loose = apply_edits(base, edits, path)
    if new_text == base:
        raise ToolError(f"the edit leaves {path} unchanged")
    import difflib  # (on first use, before the write: 2 ms and heapq of every sandbox otherwise)

    atomic_write(real, encode(new_text, bom, newline))
    diff = list(difflib.unified_diff(base.split("\n"), new_text.split("\n"), "before", "after", n=1, lineterm=""))[2:]
    if len(diff) > 40:
        diff = diff[:40] + [f"... ({len(diff) - 40} more diff lines)"]
    note = " (matched after normalising quotes, dashes or trailing spaces)" if loose else ""
    return f"edited {paths.display(ctx, real)}: {count} replacement{'s' if count != 1 else ''}{note}\n" + "\n".join(diff)
