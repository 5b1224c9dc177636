"""The approval rule for tools marked needsApproval: deny, allow, or ask on a terminal.

    decision = decide(policy.approval, tool, args)   # Decision(approved, message)
    if not decision.approved:
        return ToolResult.error(decision.message, error_type=ErrorType.GATED)

`ask` asks only when stdin is a terminal; otherwise (CI, a pipe, `runner session`
driven by a program) nothing can answer, so the call is refused and the message says how to
allow it. The question goes to stderr so it never mixes with JSON on stdout. `runner session`
reads its calls from stdin: there, pass a stream opened on /dev/tty as `stdin`, or the answer
would be taken from the call stream.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from ..untrusted.printable import json_text, printable

_ask_lock = threading.Lock()  # one question on the terminal at a time


@dataclass(frozen=True)
class Decision:
    approved: bool
    message: str = ""


def _preview(args: Any, limit: int = 300) -> str:
    """The call's arguments (the agent's) as one line a terminal only shows: JSON with the C1
    controls, line separators and bidi overrides it would leave raw written as \\u escapes."""
    try:
        text = json_text(args)
    except (TypeError, ValueError, RecursionError):
        text = printable(repr(args))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decide(rule: str, tool: str, args: Any = None, *, stdin: TextIO | None = None, stderr: TextIO | None = None,
           is_tty: Callable[[], bool] | None = None, redact: Callable[[str], str] | None = None) -> Decision:
    """Apply the rule to one call of a tool that needs approval.

    stdin/stderr/is_tty are injectable for tests; `redact` cleans the argument preview shown."""
    if rule == "allow":
        return Decision(True)
    if rule == "deny":
        return Decision(False, f"tool {tool} needs approval and the policy denies such tools (approval: deny); "
                               "use a policy with approval: ask (on a terminal) or allow")
    if rule != "ask":
        raise ValueError(f"unknown approval rule {rule!r}: use deny, allow or ask")
    inp = stdin if stdin is not None else sys.stdin
    out = stderr if stderr is not None else sys.stderr
    tty = is_tty() if is_tty is not None else _is_tty(inp)
    if not tty:
        return Decision(False, f"tool {tool} needs approval, but no terminal is attached to ask on (stdin is not a "
                               "TTY), so it was refused; run interactively, or use a policy with approval: allow")
    preview = _preview(args)
    if redact is not None:
        preview = redact(preview)
    with _ask_lock:
        out.write(f"\nrunner: tool {printable(tool)} needs approval.\n  arguments: {preview}\nAllow this call? [y/N] ")
        out.flush()
        answer = inp.readline()
    if answer.strip().lower() in ("y", "yes"):
        return Decision(True)
    return Decision(False, f"tool {tool} was not approved by the person at the terminal")


def _is_tty(inp: TextIO) -> bool:
    try:
        return inp.isatty()
    except (AttributeError, ValueError):
        return False
