"""Paths: relative to the workspace, resolved after following links, never leaving it."""
from __future__ import annotations

import os

from .context import Ctx, ToolError


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(ctx: Ctx, path, write: bool = False) -> str:
    """The real absolute path for a tool's `path` argument, or ToolError.

    Accepts a leading `@` (a mention) and `~` (the workspace); relative paths start at the
    workspace; absolute ones must be inside it (or a root the policy mounts)."""
    if not isinstance(path, str) or not path:
        raise ToolError("path must be a non-empty string", "validation")
    if "\x00" in path:
        raise ToolError("path must not contain NUL bytes", "validation")
    p = path[1:] if path.startswith("@") else path
    if p == "~" or p.startswith("~/"):
        p = os.path.join(ctx.workspace, p[2:])
    if not os.path.isabs(p):
        p = os.path.join(ctx.workspace, p)
    lexical = os.path.normpath(p)
    real = os.path.realpath(lexical)
    allowed = [(ctx.workspace, False)] + ctx.roots
    for root, read_only in allowed:
        if _inside(real, root):
            if write:
                if read_only:
                    raise ToolError(f"path is in a protected directory: {path} (mounted read-only)", "gated")
                check_protected(ctx, lexical, real, path)
            return real
    raise ToolError(f"path is outside the workspace: {path} (resolves to {real}); "
                    f"use a path inside {ctx.workspace}", "validation")


def check_protected(ctx: Ctx, lexical: str, real: str, shown: str) -> None:
    for prot in ctx.protected + ctx.protected_lexical:
        if _inside(real, prot) or _inside(lexical, prot):
            raise ToolError(f"path is in a protected directory: {shown}", "gated")


def display(ctx: Ctx, real: str) -> str:
    """A path as the agent should see it: relative to the workspace when inside it."""
    if _inside(real, ctx.workspace):
        rel = os.path.relpath(real, ctx.workspace)
        return "." if rel == "." else rel
    return real
