"""apply_patch: the `*** Begin Patch` envelope and plain unified diffs, all files or none.

Everything is parsed and every new file body is computed in memory first; only then are the
files written, and a failure while writing puts back what was already written.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from . import fsutil, paths
from .files import BOM, _TOLERANT, _check_size, _safe_encode
from .result import Result, ToolError, ok

_HUNK_HEAD = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class PatchError(ToolError):
    pass


class Hunk:
    def __init__(self) -> None:
        self.anchors: List[str] = []  # `@@ text` lines of the envelope: seek to these first
        self.old: List[str] = []
        self.new: List[str] = []
        self.hint: Optional[int] = None  # 1-based start in the old file (unified diffs)
        self.eof = False

    @property
    def empty(self) -> bool:
        return not self.old and not self.new


class FileOp:
    def __init__(self, kind: str, path: str) -> None:
        self.kind = kind  # add | delete | update
        self.path = path
        self.move_to: Optional[str] = None
        self.lines: List[str] = []  # add: the new file's lines
        self.hunks: List[Hunk] = []


# -- parsing --------------------------------------------------------------------------------
def _clean_lines(text: str) -> List[str]:
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and lines[0].startswith("```"):
        lines.pop(0)
        if lines and lines[-1].startswith("```"):
            lines.pop()
    return lines


def parse(text: str) -> List[FileOp]:
    if not isinstance(text, str) or not text.strip():
        raise PatchError("patch is empty: give a `*** Begin Patch` envelope or a unified diff")
    lines = _clean_lines(text)
    if any(ln.strip() == "*** Begin Patch" for ln in lines[:3]):
        ops = _parse_envelope(lines)
    else:
        ops = _parse_unified(lines)
    if not ops:
        raise PatchError("the patch changes no file: it has no `*** Add/Update/Delete File:` sections and no "
                         "`--- a/PATH` / `+++ b/PATH` headers")
    return ops


def _parse_envelope(lines: List[str]) -> List[FileOp]:
    i = next(n for n, ln in enumerate(lines) if ln.strip() == "*** Begin Patch") + 1
    ops: List[FileOp] = []
    op: Optional[FileOp] = None
    hunk: Optional[Hunk] = None
    ended = False
    while i < len(lines):
        ln = lines[i]
        no = i + 1
        i += 1
        head = ln.strip()
        if head == "*** End Patch":
            ended = True
            break
        for prefix, kind in (("*** Add File:", "add"), ("*** Delete File:", "delete"), ("*** Update File:", "update")):
            if ln.startswith(prefix):
                path = ln[len(prefix):].strip()
                if not path:
                    raise PatchError(f"patch line {no}: `{prefix}` needs a path")
                op = FileOp(kind, path)
                ops.append(op)
                hunk = None
                break
        else:
            if op is None:
                if not head:
                    continue
                raise PatchError(f"patch line {no}: expected `*** Add File:`, `*** Update File:` or "
                                 f"`*** Delete File:`, found {ln[:80]!r}")
            if ln.startswith("*** Move to:"):
                if op.kind != "update":
                    raise PatchError(f"patch line {no}: `*** Move to:` belongs to an `*** Update File:` section")
                op.move_to = ln[len("*** Move to:"):].strip()
            elif head == "*** End of File":
                if hunk is not None:
                    hunk.eof = True
            elif op.kind == "add":
                if ln.startswith("+"):
                    op.lines.append(ln[1:])
                elif not ln:
                    op.lines.append("")
                else:
                    raise PatchError(f"patch line {no}: in `*** Add File: {op.path}` every line starts with `+`, "
                                     f"found {ln[:80]!r}")
            elif op.kind == "delete":
                if head:
                    raise PatchError(f"patch line {no}: `*** Delete File: {op.path}` takes no lines, found {ln[:80]!r}")
            elif ln.startswith("@@"):
                if hunk is None or not hunk.empty:
                    hunk = Hunk()
                    op.hunks.append(hunk)
                anchor = ln[2:].strip()
                m = _HUNK_HEAD.match(ln)
                if m:
                    hunk.hint = int(m.group(1))
                    anchor = m.group(5).strip()
                if anchor:
                    hunk.anchors.append(anchor)
            else:
                if hunk is None:
                    hunk = Hunk()
                    op.hunks.append(hunk)
                _hunk_line(hunk, ln, no, op.path)
    if not ended:
        raise PatchError("the patch has no `*** End Patch` line: it may have been cut off; send it whole")
    for op in ops:
        if op.kind == "update" and not any(not h.empty for h in op.hunks) and not op.move_to:
            raise PatchError(f"`*** Update File: {op.path}` has no hunks: add `@@` sections with ` `, `-` and `+` lines")
    return ops


def _hunk_line(hunk: Hunk, ln: str, no: int, path: str) -> None:
    if ln.startswith(" "):
        hunk.old.append(ln[1:])
        hunk.new.append(ln[1:])
    elif ln.startswith("-"):
        hunk.old.append(ln[1:])
    elif ln.startswith("+"):
        hunk.new.append(ln[1:])
    elif ln == "":
        hunk.old.append("")
        hunk.new.append("")
    elif ln.startswith("\\"):
        pass  # "\ No newline at end of file"
    else:
        raise PatchError(f"patch line {no} (in {path}): a hunk line starts with ' ', '-' or '+', found {ln[:80]!r}")


def _diff_path(raw: str) -> Optional[str]:
    p = raw.split("\t")[0].strip()
    if p.startswith('"') and p.endswith('"') and len(p) > 1:
        p = p[1:-1]
    if p == "/dev/null":
        return None
    if p.startswith(("a/", "b/")):
        p = p[2:]
    return p


def _parse_unified(lines: List[str]) -> List[FileOp]:
    ops: List[FileOp] = []
    i = 0
    rename_from: Optional[str] = None
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("diff --git "):
            rename_from = None
            i += 1
            continue
        if ln.startswith("rename from "):
            rename_from = ln[len("rename from "):].strip()
            i += 1
            continue
        if ln.startswith("rename to ") and rename_from:
            op = FileOp("update", rename_from)
            op.move_to = ln[len("rename to "):].strip()
            ops.append(op)
            i += 1
            continue
        if ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_p, new_p = _diff_path(ln[4:]), _diff_path(lines[i + 1][4:])
            i += 2
            if old_p is None and new_p is None:
                raise PatchError(f"patch line {i - 1}: both sides are /dev/null")
            if old_p is None:
                op = FileOp("add", new_p)
            elif new_p is None:
                op = FileOp("delete", old_p)
            else:
                prev = ops[-1] if ops and rename_from and ops[-1].path == rename_from else None
                if prev is not None:
                    op = prev
                    ops.pop()
                else:
                    op = FileOp("update", old_p)
                    if new_p != old_p:
                        op.move_to = new_p
            ops.append(op)
            i = _parse_unified_hunks(lines, i, op)
            rename_from = None
            continue
        i += 1
    return ops


def _parse_unified_hunks(lines: List[str], i: int, op: FileOp) -> int:
    while i < len(lines) and lines[i].startswith("@@"):
        m = _HUNK_HEAD.match(lines[i])
        if not m:
            raise PatchError(f"patch line {i + 1}: a unified-diff hunk header looks like `@@ -3,4 +3,5 @@`, "
                             f"found {lines[i][:80]!r}")
        hunk = Hunk()
        hunk.hint = int(m.group(1))
        old_n = int(m.group(2)) if m.group(2) is not None else 1
        new_n = int(m.group(4)) if m.group(4) is not None else 1
        i += 1
        while i < len(lines):
            ln = lines[i]
            if ln.startswith("@@") or ln.startswith("diff --git "):
                break
            if ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
                break
            done = len(hunk.old) >= old_n and len(hunk.new) >= new_n
            if ln.startswith("\\"):
                i += 1
                continue
            if done or not (ln == "" or ln[0] in " -+"):
                break
            _hunk_line(hunk, ln, i + 1, op.path)
            i += 1
        if op.kind == "add":
            op.lines.extend(hunk.new)
        elif op.kind == "update":
            op.hunks.append(hunk)
    return i


def touched_paths(text: str) -> List[str]:
    """Every path a patch would write, create, delete or move to ([] when it does not parse)."""
    try:
        ops = parse(text)
    except ToolError:
        return []
    out: List[str] = []
    for op in ops:
        for p in (op.path, op.move_to):
            if p and p not in out:
                out.append(p)
    return out


# -- applying -------------------------------------------------------------------------------
def _levels():
    return (lambda s: s, lambda s: s.rstrip(), lambda s: s.strip(), lambda s: s.translate(_TOLERANT).strip())


def _matches_at(lines: List[str], pos: int, want: List[str], norm) -> bool:
    if pos < 0 or pos + len(want) > len(lines):
        return False
    return all(norm(lines[pos + k]) == norm(w) for k, w in enumerate(want))


def _seek(lines: List[str], start: int, want: List[str], hint: Optional[int], eof: bool) -> Optional[int]:
    for norm in _levels():
        if eof and _matches_at(lines, len(lines) - len(want), want, norm) and len(lines) - len(want) >= start:
            return len(lines) - len(want)
        found = [p for p in range(start, len(lines) - len(want) + 1) if _matches_at(lines, p, want, norm)]
        if found:
            if hint is not None:
                return min(found, key=lambda p: abs(p - hint))
            return found[0]
    return None


def _near_miss(lines: List[str], start: int, want: List[str]) -> Tuple[int, str, str]:
    """(1-based file line, what the patch expects there, what the file has) of the best partial match."""
    best, best_pos = 0, start
    for p in range(start, len(lines)):
        k = 0
        while k < len(want) and p + k < len(lines) and lines[p + k].strip() == want[k].strip():
            k += 1
        if k > best:
            best, best_pos = k, p
    pos = best_pos + best
    expect = want[best] if best < len(want) else ""
    have = lines[pos] if pos < len(lines) else "(end of file)"
    return pos + 1, expect, have


def apply_hunks(lines: List[str], hunks: List[Hunk], shown: str) -> List[str]:
    lines = list(lines)
    cursor = 0
    delta = 0
    real_hunks = [h for h in hunks if not h.empty]
    for k, h in enumerate(real_hunks, 1):
        name = f"hunk {k} of {len(real_hunks)} in {shown}"
        start = cursor
        for anchor in h.anchors:
            at = _seek(lines, start, [anchor], None, False)
            if at is None:
                at = next((p for p in range(start, len(lines)) if anchor.strip() in lines[p]), None)
            if at is None:
                raise PatchError(f"{name} does not apply: its `@@ {anchor}` line was not found after line {start}. "
                                 f"Read the file and make the patch again; no file was changed")
            start = at + 1
        hint = h.hint - 1 + delta if h.hint is not None else None
        if not h.old:
            if h.eof or (hint is None and not h.anchors):
                pos = len(lines)
            elif hint is not None and not h.anchors:
                pos = max(start, min(len(lines), h.hint + delta))  # `-3,0`: insert after line 3
            else:
                pos = start
        else:
            pos = _seek(lines, start, h.old, hint, h.eof)
            if pos is None:
                near, expect, have = _near_miss(lines, start, h.old)
                raise PatchError(f"{name} does not apply: context did not match near line {near}: the patch "
                                 f"expects {expect!r}, the file has {have!r}. Read the file and make the patch "
                                 f"again; no file was changed")
        lines[pos:pos + len(h.old)] = h.new
        cursor = pos + len(h.new)
        delta += len(h.new) - len(h.old)
    return lines


class _Text:
    """A file's lines plus how to write them back (BOM, CRLF, final newline)."""

    def __init__(self, data: bytes) -> None:
        self.bom = data.startswith(BOM)
        text = data[len(BOM):].decode("utf-8", "surrogateescape") if self.bom else data.decode("utf-8", "surrogateescape")
        self.crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
        if self.crlf:
            text = text.replace("\r\n", "\n")
        self.eol = text.endswith("\n") or text == ""
        self.lines = text.split("\n")
        if self.lines and self.lines[-1] == "" and text:
            self.lines.pop()
        if text == "":
            self.lines = []

    def dump(self, lines: List[str]) -> bytes:
        nl = "\r\n" if self.crlf else "\n"
        body = nl.join(lines) + (nl if lines and self.eol else "")
        data = _safe_encode(body)
        return BOM + data if self.bom else data


def _read_current(real: str, shown: str, state: Dict[str, Optional[bytes]]) -> Optional[bytes]:
    if real in state:
        return state[real]
    if os.path.isdir(real):
        raise PatchError(f"{shown} is a directory, not a file")
    if not os.path.exists(real):
        return None
    return fsutil.read_bytes(real, shown)


def apply_patch(ctx, args) -> Result:
    ops = parse(args.get("patch"))
    state: Dict[str, Optional[bytes]] = {}  # real path -> new body (None: deleted)
    order: List[str] = []
    summary: List[str] = []

    def put(real: str, body: Optional[bytes]) -> None:
        if real not in order:
            order.append(real)
        state[real] = body

    for op in ops:
        real = paths.resolve_for_write(ctx, op.path)
        shown = paths.show(ctx, real)
        current = _read_current(real, shown, state)
        if op.kind == "add":
            if current is not None:
                raise PatchError(f"`Add File: {shown}` but {shown} already exists: use `*** Update File:` to change "
                                 f"it (no file was changed)")
            body = _safe_encode("\n".join(op.lines) + ("\n" if op.lines else ""))
            _check_size(ctx, len(body), shown)
            put(real, body)
            summary.append(f"A {shown}")
        elif op.kind == "delete":
            if current is None:
                raise PatchError(f"`Delete File: {shown}` but {shown} does not exist (no file was changed)")
            put(real, None)
            summary.append(f"D {shown}")
        else:
            if current is None:
                raise PatchError(f"`Update File: {shown}` but {shown} does not exist: use `*** Add File:` to "
                                 f"create it (no file was changed)")
            if fsutil.looks_binary(current[: fsutil.TEXT_SAMPLE]):
                raise PatchError(f"{shown} is a binary file: apply_patch changes text files only")
            t = _Text(current)
            new_lines = apply_hunks(t.lines, op.hunks, shown)
            body = t.dump(new_lines)
            _check_size(ctx, len(body), shown)
            if op.move_to:
                dest = paths.resolve_for_write(ctx, op.move_to)
                dshown = paths.show(ctx, dest)
                if dest != real and _read_current(dest, dshown, state) is not None:
                    raise PatchError(f"`Move to: {dshown}` but {dshown} already exists (no file was changed)")
                put(real, None)
                put(dest, body)
                summary.append(f"R {shown} -> {dshown}")
            else:
                put(real, body)
                summary.append(f"M {shown}")
    _commit(ctx, order, state)
    n = len(summary)
    return ok(f"applied the patch: {n} file{'s' if n != 1 else ''} changed\n" + "\n".join(summary),
              files=summary)


def _commit(ctx, order: List[str], state: Dict[str, Optional[bytes]]) -> None:
    """Write every planned change; on a failure, put back the files already changed."""
    undo: List[Tuple[str, Optional[bytes]]] = []
    try:
        for real in order:
            shown = paths.show(ctx, real)
            before = fsutil.read_bytes(real, shown) if os.path.isfile(real) else None
            body = state[real]
            if body is None:
                if before is not None:
                    os.unlink(real)
            else:
                fsutil.make_parents(ctx, os.path.dirname(real))
                fsutil.atomic_write(real, body, shown)
            undo.append((real, before))
    except (OSError, ToolError) as e:
        for real, before in reversed(undo):
            try:
                if before is None:
                    if os.path.exists(real):
                        os.unlink(real)
                else:
                    fsutil.atomic_write(real, before, real)
            except (OSError, ToolError):
                pass
        raise PatchError(f"writing the patched files failed ({e}); the files already written were put back")
