"""Where a tool's path argument points, and whether a tool may read or write there.

Paths are taken from the workspace. A leading `@` (how agents mention files) is dropped; `~`
is the user's home when that lies in an allowed place, else the workspace. Absolute paths are
allowed inside the workspace or a configured root. Every check is made on the real path, after
following symlinks, so `..` and links that leave the allowed places are refused.
"""
from __future__ import annotations

import os
from typing import Optional

from .result import ToolError


def inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _allowed(ctx, real: str) -> bool:
    return inside(real, ctx.workspace) or any(inside(real, r) for r, _ro in ctx.roots)


def expand(ctx, raw: str) -> str:
    """The absolute, normalised path an argument names (links not yet followed)."""
    if not isinstance(raw, str):
        raise ToolError(f"a path must be a string, got {type(raw).__name__}")
    p = raw.strip()
    if p.startswith("@"):
        p = p[1:]
    if "\x00" in p:
        raise ToolError("a path cannot contain a NUL character")
    if p == "~" or p.startswith("~/"):
        home = os.path.expanduser(p)
        if home != p and _allowed(ctx, os.path.realpath(home)):
            p = home
        else:
            p = ctx.workspace_given + p[1:]
    if not p:
        p = "."
    if not os.path.isabs(p):
        p = os.path.join(ctx.workspace_given, p)
    return os.path.normpath(p)


def resolve(ctx, raw: str) -> str:
    """The real path of `raw`, refused when it is outside the workspace and the roots."""
    real = os.path.realpath(expand(ctx, raw))
    if not _allowed(ctx, real):
        raise ToolError(f"path is outside the workspace: {raw}. Use a path inside the workspace "
                        f"(relative paths start there).")
    return real


def show(ctx, real: str) -> str:
    """How a path is shown in answers: relative to the workspace when inside it."""
    if real == ctx.workspace:
        return "."
    if inside(real, ctx.workspace):
        return real[len(ctx.workspace.rstrip("/")) + 1:]
    return real


def protected_dir(ctx, real: str, lexical: Optional[str] = None) -> Optional[str]:
    """The protected directory or read-only root `real` lies in, or None."""
    for cand in (real, lexical):
        if cand is None:
            continue
        for d in ctx.protected:
            if inside(cand, d):
                return d
        for r, read_only in ctx.roots:
            if read_only and inside(cand, r) and not inside(cand, ctx.workspace):
                return r
    return None


def check_writable(ctx, real: str, lexical: Optional[str] = None) -> None:
    if protected_dir(ctx, real, lexical) is not None:
        raise ToolError(f"path is in a protected directory: {show(ctx, real)}")


def resolve_for_write(ctx, raw: str) -> str:
    """resolve() plus the protected-directory check, for write, edit and apply_patch."""
    lexical = expand(ctx, raw)
    real = resolve(ctx, raw)
    check_writable(ctx, real, lexical)
    return real


def resolve_dir(ctx, raw: Optional[str], what: str = "path") -> str:
    """An existing directory (default: the workspace)."""
    real = resolve(ctx, raw if raw else ".")
    if not os.path.exists(real):
        raise ToolError(f"{what} not found: {raw}")
    if not os.path.isdir(real):
        raise ToolError(f"{what} is not a directory: {raw}")
    return real
