"""apply_patch: the `*** Begin Patch` envelope and plain unified diffs, over many files,
all or nothing: every file's new text is computed in memory before anything is written."""
from __future__ import annotations

import os
import re

from . import paths
from .context import Ctx, ToolError
from .fsutil import commit, decode, discard, encode, stage

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class Change:
    def __init__(self, kind: str, path: str, move_to: str | None = None) -> None:
        self.kind, self.path, self.move_to = kind, path, move_to  # kind: add | delete | update
        self.add_lines: list[str] = []
        self.hunks: list[dict] = []  # {"header": str, "lines": [(op, text)], "hint": int | None}


def parse(patch: str) -> list[Change]:
    if not isinstance(patch, str) or not patch.strip():
        raise ToolError("patch is empty")
    text = patch.replace("\r\n", "\n")
    if "*** Begin Patch" in text:
        return _parse_envelope(text)
    if re.search(r"^(---|\+\+\+) ", text, re.M):
        return _parse_unified(text)
    raise ToolError("patch format not recognised: use '*** Begin Patch' … '*** End Patch', or a unified diff "
                    "with '--- a/file' and '+++ b/file' lines")


def _parse_envelope(text: str) -> list[Change]:
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == "*** Begin Patch")
    changes: list[Change] = []
    cur: Change | None = None
    ended = False
    for raw in lines[start + 1:]:
        if raw.strip() == "*** End Patch":
            ended = True
            break
        if raw.startswith("*** Add File: "):
            cur = Change("add", raw[14:].strip())
            changes.append(cur)
        elif raw.startswith("*** Delete File: "):
            cur = Change("delete", raw[17:].strip())
            changes.append(cur)
        elif raw.startswith("*** Update File: "):
            cur = Change("update", raw[17:].strip())
            changes.append(cur)
        elif raw.startswith("*** Move to: "):
            if cur is None or cur.kind != "update":
                raise ToolError("'*** Move to:' must follow '*** Update File:'")
            cur.move_to = raw[13:].strip()
        elif raw.startswith("*** End of File"):
            continue
        elif cur is None:
            if raw.strip():
                raise ToolError(f"unexpected line before the first file: {raw[:80]!r}")
        elif cur.kind == "add":
            if raw.startswith("+"):
                cur.add_lines.append(raw[1:])
            elif raw.strip():
                raise ToolError(f"in Add File {cur.path}: every line must start with '+': {raw[:80]!r}")
        elif cur.kind == "update":
            if raw.startswith("@@"):
                cur.hunks.append({"header": raw[2:].strip(), "lines": [], "hint": None})
            elif raw[:1] in (" ", "-", "+") or raw == "":
                if not cur.hunks:
                    cur.hunks.append({"header": "", "lines": [], "hint": None})
                cur.hunks[-1]["lines"].append((raw[:1] or " ", raw[1:]))
            else:
                raise ToolError(f"in Update File {cur.path}: a line must start with ' ', '-', '+' or '@@': {raw[:80]!r}")
    if not ended:
        raise ToolError("the patch has no '*** End Patch' line")
    if not changes:
        raise ToolError("the patch changes no file")
    for c in changes:  # a trailing empty context line is an artefact of the text's last newline
        for h in c.hunks:
            while h["lines"] and h["lines"][-1] == (" ", ""):
                h["lines"].pop()
    return changes


def _strip_prefix(p: str) -> str:
    p = p.split("\t")[0].strip()
    return p[2:] if p.startswith(("a/", "b/")) else p


def _parse_unified(text: str) -> list[Change]:
    lines = text.split("\n")
    changes: list[Change] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
            if old == "/dev/null":
                cur = Change("add", new)
            elif new == "/dev/null":
                cur = Change("delete", old)
            else:
                cur = Change("update", old, move_to=new if new != old else None)
            changes.append(cur)
            i += 2
            while i < len(lines) and not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
                m = _HUNK.match(lines[i])
                if m:
                    hunk = {"header": "", "lines": [], "hint": int(m.group(1))}
                    old_left = int(m.group(2) or 1)
                    new_left = int(m.group(4) or 1)
                    i += 1
                    while i < len(lines) and (old_left > 0 or new_left > 0):
                        ln = lines[i]
                        if ln.startswith("\\"):
                            i += 1
                            continue
                        op = ln[:1] or " "
                        if op not in " -+":
                            break
                        hunk["lines"].append((op, ln[1:]))
                        old_left -= op in " -"
                        new_left -= op in " +"
                        i += 1
                    if cur.kind == "add":
                        cur.add_lines += [t for op, t in hunk["lines"] if op == "+"]
                    elif cur.kind == "update":
                        cur.hunks.append(hunk)
                else:
                    i += 1
        else:
            i += 1
    if not changes:
        raise ToolError("the unified diff names no file")
    return changes


def patch_paths(patch: str) -> list[str]:
    """Every path a patch would write (for the controller's protected-path check)."""
    out = []
    for c in parse(patch):
        out.append(c.path)
        if c.move_to:
            out.append(c.move_to)
    return out


def _find(lines: list[str], block: list[str], start: int, hint: int | None) -> int:
    """Index where block matches lines (exact, then ignoring trailing, then all surrounding
    whitespace), searching from `start` (or around `hint`); -1 if nowhere."""
    if not block:
        return min(start, len(lines))
    for norm in (lambda s: s, lambda s: s.rstrip(), lambda s: s.strip()):
        want = [norm(b) for b in block]
        order = range(start, len(lines) - len(block) + 1)
        if hint is not None:
            h = max(0, hint - 1)
            order = sorted(order, key=lambda j: abs(j - h))
        for j in order:
            if all(norm(lines[j + k]) == want[k] for k in range(len(block))):
                return j
    return -1


def _apply_hunks(c: Change, text: str) -> str:
    lines = text.split("\n")
    trailing = lines and lines[-1] == ""
    if trailing:
        lines.pop()
    pos = 0
    for n, h in enumerate(c.hunks, 1):
        if h["header"]:  # a line to find first (a function or class heading); context follows it
            anchor = next((j for j in range(pos, len(lines)) if h["header"].strip() in lines[j]), -1)
            if anchor >= 0:
                pos = anchor
        old = [t for op, t in h["lines"] if op in " -"]
        new = [t for op, t in h["lines"] if op in " +"]
        at = _find(lines, old, pos, h["hint"])
        if at < 0 and pos:
            at = _find(lines, old, 0, h["hint"])
        if at < 0:
            near = h["hint"] or pos + 1
            first = next((t for op, t in h["lines"] if op in " -"), "")
            raise ToolError(f"apply_patch: {c.path}, hunk {n}: context did not match near line {near} "
                            f"(looked for {first!r}); read the file and make the patch from its current text")
        lines[at:at + len(old)] = new
        pos = at + len(new)
    return "\n".join(lines) + ("\n" if trailing else "")


def apply_patch(ctx: Ctx, args: dict):
    changes = parse(args["patch"])
    plan: list = []  # (action, real path, data, shown), all computed before anything is written
    seen: set[str] = set()
    for c in changes:
        real = paths.resolve(ctx, c.path, write=True)
        if real in seen:
            raise ToolError(f"apply_patch: {c.path} appears twice in the patch")
        seen.add(real)
        if c.kind == "add":
            if os.path.exists(real):
                raise ToolError(f"apply_patch: cannot add {c.path}: it exists (use Update File)")
            plan.append(("write", real, ("\n".join(c.add_lines) + "\n").encode("utf-8"), c.path))
        elif c.kind == "delete":
            if not os.path.isfile(real):
                raise ToolError(f"apply_patch: cannot delete {c.path}: no such file")
            plan.append(("delete", real, None, c.path))
        else:
            if not os.path.isfile(real):
                raise ToolError(f"apply_patch: cannot update {c.path}: no such file")
            with open(real, "rb") as f:
                text, bom, newline = decode(f.read())
            new_text = _apply_hunks(c, text.replace("\r\n", "\n"))
            data = encode(new_text, bom, newline)
            if c.move_to:
                dest = paths.resolve(ctx, c.move_to, write=True)
                if os.path.exists(dest) and dest != real:
                    raise ToolError(f"apply_patch: cannot move {c.path} to {c.move_to}: it exists")
                plan.append(("write-from", dest, data, c.move_to))
                plan.append(("delete", real, None, c.path))
                seen.add(dest)
            else:
                plan.append(("write", real, data, c.path))
    # Every new content is written to a temp file first: a full disk then fails the patch before
    # any file changed. Only renames and deletes follow.
    staged = []
    try:
        for action, real, data, _ in plan:
            if action != "delete":
                staged.append(stage(real, data))
        for one in staged:
            commit(one)
    except BaseException:
        for one in staged:
            discard(one)
        raise
    for action, real, _, _ in plan:
        if action == "delete":
            os.unlink(real)
    summary = []
    for c in changes:
        tag = {"add": "A", "delete": "D", "update": "M"}[c.kind]
        summary.append(f"{tag} {c.path}" + (f" -> {c.move_to}" if c.move_to else ""))
    return f"applied patch to {len(changes)} file{'s' if len(changes) != 1 else ''}:\n" + "\n".join(summary)
