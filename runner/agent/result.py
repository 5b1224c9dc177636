"""What a tool body returns, and the error it raises to say what went wrong."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

Content = Union[str, List[Dict[str, str]]]


class ToolError(Exception):
    """A tool failure the caller can act on: str() is the whole message of the error result."""

    def __init__(self, message: str, **meta: Any) -> None:
        super().__init__(message)
        self.meta = meta


class Result:
    """content: text, or a list of blocks ({"type": "text"|"image", ...}); meta: extra facts."""

    __slots__ = ("content", "is_error", "meta")

    def __init__(self, content: Content = "", is_error: bool = False, meta: Optional[Dict[str, Any]] = None) -> None:
        self.content = content
        self.is_error = is_error
        self.meta = meta or {}

    def to_msg(self, call_id: Any) -> Dict[str, Any]:
        return {"op": "result", "id": call_id, "content": self.content, "is_error": bool(self.is_error),
                "meta": self.meta}

    def __repr__(self) -> str:
        return f"Result({self.content!r}, is_error={self.is_error}, meta={self.meta})"


def ok(content: Content, **meta: Any) -> Result:
    return Result(content, False, meta)


def error(message: str, **meta: Any) -> Result:
    return Result(message, True, meta)
