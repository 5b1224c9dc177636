"""read, write and edit."""
from __future__ import annotations

import base64
import difflib
import os
from typing import Iterator, List, Optional, Tuple

from . import fsutil, paths
from .result import Result, ToolError, error, ok

PAGE_LINES = 2000
PAGE_BYTES = 50 * 1024
MAX_IMAGE_BYTES = 10 * 1024 * 1024
DIFF_MAX_LINES = 60
BOM = b"\xef\xbb\xbf"


# -- read -----------------------------------------------------------------------------------
def image_type(head: bytes) -> Optional[str]:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _lines(f, cap: int) -> Iterator[Tuple[bytes, int]]:
    """(first `cap` bytes of the line, its full length) for each line, in bounded memory."""
    while True:
        part = f.readline(cap)
        if not part:
            return
        length = len(part)
        if len(part) == cap and not part.endswith(b"\n"):
            while True:
                more = f.readline(1 << 20)
                length += len(more)
                if not more or more.endswith(b"\n"):
                    break
        yield part, length


def _count_rest(f) -> Tuple[int, bool]:
    """Lines left from the file position, and whether any byte was left at all."""
    n = 0
    last = b""
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        n += chunk.count(b"\n")
        last = chunk
    if last and not last.endswith(b"\n"):
        n += 1
    return n, bool(last)


def _fmt_size(n: int) -> str:
    for unit, mult in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return "%.1f %s" % (n / mult, unit)
    return "%d bytes" % n


def read(ctx, args) -> Result:
    raw = args.get("path")
    real = paths.resolve(ctx, raw)
    shown = paths.show(ctx, real)
    if os.path.isdir(real):
        return error(f"{shown} is a directory: use ls to list it")
    offset = args.get("offset") or 1
    limit = args.get("limit")
    if not isinstance(offset, int) or offset < 1:
        return error(f"offset must be a line number from 1, got {offset!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        return error(f"limit must be a number of lines from 1, got {limit!r}")
    fd = fsutil.open_read(real, shown)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(fsutil.TEXT_SAMPLE)
        media = image_type(head)
        if media is not None:
            if size > MAX_IMAGE_BYTES:
                return error(f"{shown} is an image ({media}) of {_fmt_size(size)}, over the "
                             f"{_fmt_size(MAX_IMAGE_BYTES)} read can return")
            data = head + f.read()
            return ok([{"type": "text", "text": f"image {shown} ({media}, {len(data)} bytes)"},
                       {"type": "image", "data": base64.b64encode(data).decode("ascii"), "media_type": media}],
                      path=shown, bytes=len(data), media_type=media)
        if fsutil.looks_binary(head):
            return error(f"{shown} is a binary file ({size} bytes); read shows text only. Inspect it with "
                         f"bash, e.g. `xxd {shown} | head -50` or `file {shown}`", path=shown, bytes=size)
        f.seek(0)
        return _page(f, shown, offset, limit)


def _page(f, shown: str, offset: int, limit: Optional[int]) -> Result:
    max_lines = min(limit, PAGE_LINES) if limit else PAGE_LINES
    out: List[str] = []
    used = 0
    lineno = 0
    stop: Optional[str] = None
    long_line: Optional[Tuple[int, int]] = None
    for part, length in _lines(f, PAGE_BYTES + 1):
        lineno += 1
        if lineno < offset:
            continue
        if len(out) >= max_lines:
            stop = "limit" if limit and limit <= PAGE_LINES else "lines"
            break
        if length > PAGE_BYTES:
            long_line = (lineno, length)
            stop = "long"
            break
        text = part.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
        entry = "%6d\t%s" % (lineno, text)
        cost = len(entry.encode("utf-8")) + 1
        if out and used + cost > PAGE_BYTES:
            stop = "bytes"
            break
        out.append(entry)
        used += cost
    if stop is None:
        total = lineno
    else:
        rest, _ = _count_rest(f)
        total = lineno + rest
    if not out:
        if long_line is not None:
            n, length = long_line
            return error(f"line {n} of {shown} is {length} bytes, longer than one page ({PAGE_BYTES} bytes). "
                         f"Read it in pieces with bash, e.g. `sed -n '{n}p' {shown} | fold -w 2000 | head -n 20`",
                         path=shown, total_lines=total)
        if total == 0:
            if offset == 1:
                return ok("(empty file)", path=shown, total_lines=0)
            return error(f"offset {offset} is past the end of {shown}: the file is empty", path=shown,
                         total_lines=0)
        return error(f"offset {offset} is past the end of {shown}: it has {total} line{'s' if total != 1 else ''}. "
                     f"Use an offset from 1 to {total}.", path=shown, total_lines=total)
    first, last = offset, offset + len(out) - 1
    text = "\n".join(out)
    meta = {"path": shown, "total_lines": total, "first_line": first, "last_line": last}
    if stop is not None and last < total:
        why = {"lines": f"a page is at most {PAGE_LINES} lines", "bytes": f"a page is at most {PAGE_BYTES // 1024} KiB",
               "limit": "limit reached", "long": f"line {last + 1} is longer than a page"}[stop]
        text += f"\n\n[showing lines {first}-{last} of {total} ({why}); continue with offset={last + 1}]"
        meta["next_offset"] = last + 1
    return ok(text, **meta)


# -- write ----------------------------------------------------------------------------------
def _safe_encode(text: str) -> bytes:
    """UTF-8; bytes that read() or edit() decoded as escapes go back as they were."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _check_size(ctx, n: int, shown: str) -> None:
    if n > ctx.max_write_bytes:
        raise ToolError(f"refusing to write {n} bytes to {shown}: over the limit of {ctx.max_write_bytes} bytes "
                        f"for one write set by the policy")


def write(ctx, args) -> Result:
    raw = args.get("path")
    content = args.get("content")
    if not isinstance(content, str):
        return error("content must be a string: the whole text of the file")
    real = paths.resolve_for_write(ctx, raw)
    shown = paths.show(ctx, real)
    if os.path.isdir(real):
        return error(f"{shown} is a directory: give the path of a file")
    data = _safe_encode(content)
    _check_size(ctx, len(data), shown)
    fsutil.make_parents(ctx, os.path.dirname(real))
    created = fsutil.atomic_write(real, data, shown)
    return ok(f"wrote {len(data)} bytes to {shown}", path=shown, bytes=len(data), created=created)


# -- edit -----------------------------------------------------------------------------------
_TOLERANT = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u205f": " ", "\u3000": " ",
    **{chr(c): " " for c in range(0x2000, 0x200B)},
})


def _normalise(text: str) -> Tuple[str, List[int]]:
    """Text with quotes, dashes and odd spaces made plain and trailing blanks removed, and
    for each of its characters the index of the original character."""
    t = text.translate(_TOLERANT)
    out: List[str] = []
    idx: List[int] = []
    pos = 0
    lines = t.split("\n")
    for i, line in enumerate(lines):
        kept = line.rstrip(" \t")
        out.append(kept)
        idx.extend(range(pos, pos + len(kept)))
        pos += len(line)
        if i < len(lines) - 1:
            out.append("\n")
            idx.append(pos)
            pos += 1
    return "".join(out), idx


def _find_all(hay: str, needle: str) -> List[int]:
    found = []
    i = hay.find(needle)
    while i >= 0:
        found.append(i)
        i = hay.find(needle, i + len(needle))
    return found


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _closest(text: str, old: str) -> str:
    """A hint naming the file line most like the first line of old_string."""
    first = next((ln.strip() for ln in old.split("\n") if ln.strip()), "")
    if not first or len(text) > 2_000_000:
        return ""
    lines = text.split("\n")
    best, best_n = 0.0, 0
    for n, line in enumerate(lines, 1):
        cand = line.strip()
        if not cand:
            continue
        sm = difflib.SequenceMatcher(None, first, cand, autojunk=False)
        if sm.real_quick_ratio() <= best or sm.quick_ratio() <= best:
            continue
        r = sm.ratio()
        if r > best:
            best, best_n = r, n
    if best < 0.6:
        return ""
    shown = lines[best_n - 1].strip()
    if len(shown) > 200:
        shown = shown[:200] + "…"
    return f" The most similar line is {best_n}: {shown!r}."


def _apply_one(text: str, old: str, new: str, replace_all: bool, shown: str) -> Tuple[str, int, bool]:
    """(new text, replacements, tolerant?) or a ToolError that says how to fix the edit."""
    if old == "":
        raise ToolError("old_string is empty: give the exact text to replace (to create or overwrite a whole "
                        "file use write)")
    hits = _find_all(text, old)
    if len(hits) == 1 or (hits and replace_all):
        return (text.replace(old, new) if replace_all else text.replace(old, new, 1)), len(hits), False
    if len(hits) > 1:
        where = ", ".join(str(_line_of(text, h)) for h in hits[:10]) + (", …" if len(hits) > 10 else "")
        raise ToolError(f"old_string found {len(hits)} times in {shown} (lines {where}). Include more of the "
                        f"surrounding lines in old_string to make it unique, or set replace_all to true to "
                        f"replace every occurrence")
    norm_text, idx = _normalise(text)
    norm_old, _ = _normalise(old)
    if norm_old.strip():
        soft = _find_all(norm_text, norm_old)
        if len(soft) == 1 or (soft and replace_all):
            for s in reversed(soft):
                start, end = idx[s], idx[s + len(norm_old) - 1] + 1
                text = text[:start] + new + text[end:]
            return text, len(soft), True
        if len(soft) > 1:
            raise ToolError(f"old_string not found exactly in {shown}; ignoring whitespace, quote and dash "
                            f"differences it matches {len(soft)} places. Copy the exact text from read, with "
                            f"more surrounding lines")
    raise ToolError(f"old_string not found in {shown}. Read the file again and copy the exact text, including "
                    f"indentation and line breaks.{_closest(text, old)}")


def _diff(before: str, after: str, shown: str) -> str:
    def split(text: str) -> List[str]:
        return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    lines = list(difflib.unified_diff(split(before), split(after), f"a/{shown}", f"b/{shown}", n=2, lineterm=""))
    if len(lines) > DIFF_MAX_LINES:
        cut = len(lines) - DIFF_MAX_LINES
        lines = lines[:DIFF_MAX_LINES] + [f"… ({cut} more diff lines)"]
    return "\n".join(lines)


def edit(ctx, args) -> Result:
    raw = args.get("path")
    edits = args.get("edits")
    if edits:
        if args.get("old_string") is not None:
            return error("give either old_string/new_string or edits, not both")
        if not isinstance(edits, list):
            return error("edits must be a list of {old_string, new_string} objects")
    else:
        if args.get("old_string") is None or args.get("new_string") is None:
            return error("edit needs old_string and new_string (or edits: [{old_string, new_string}, …])")
        edits = [{"old_string": args["old_string"], "new_string": args["new_string"],
                  "replace_all": bool(args.get("replace_all"))}]
    real = paths.resolve_for_write(ctx, raw)
    shown = paths.show(ctx, real)
    if os.path.isdir(real):
        return error(f"{shown} is a directory: edit changes one file")
    if not os.path.exists(real):
        return error(f"file not found: {shown}. To create a file use write")
    data = fsutil.read_bytes(real, shown)
    if b"\x00" in data[: fsutil.TEXT_SAMPLE] or fsutil.looks_binary(data[: fsutil.TEXT_SAMPLE]):
        return error(f"{shown} is a binary file: edit changes text files only")
    bom = data.startswith(BOM)
    text = data[len(BOM):].decode("utf-8", "surrogateescape") if bom else data.decode("utf-8", "surrogateescape")
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    if crlf:
        text = text.replace("\r\n", "\n")
    original = text
    total = 0
    tolerant = False
    n = len(edits)
    for i, e in enumerate(edits, 1):
        if not isinstance(e, dict) or not isinstance(e.get("old_string"), str) or not isinstance(e.get("new_string"), str):
            return error(f"edit {i} of {n}: each edit is an object with old_string and new_string strings")
        old, new = e["old_string"].lstrip("\ufeff"), e["new_string"]
        if crlf:
            old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == new:
            return error((f"edit {i} of {n}: " if n > 1 else "") + "old_string and new_string are the same: "
                         "nothing would change" + (". No edit was applied." if n > 1 else ""))
        try:
            text, count, soft = _apply_one(text, old, new, bool(e.get("replace_all")), shown)
        except ToolError as err:
            prefix = f"edit {i} of {n}: " if n > 1 else ""
            suffix = " No edit was applied (edits are all-or-nothing)." if n > 1 else ""
            return error(prefix + str(err) + suffix)
        total += count
        tolerant = tolerant or soft
    if text == original:
        return error(f"the edit leaves {shown} unchanged: nothing was written")
    out = text.replace("\n", "\r\n") if crlf else text
    body = _safe_encode(out)
    if bom:
        body = BOM + body
    _check_size(ctx, len(body), shown)
    fsutil.atomic_write(real, body, shown)
    head = f"edited {shown}: {total} replacement{'s' if total != 1 else ''}"
    if tolerant:
        head += " (matched after normalising whitespace, quotes and dashes)"
    return ok(head + "\n" + _diff(original, text, shown), path=shown, replacements=total, tolerant=tolerant)

