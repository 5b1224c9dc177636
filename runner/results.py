"""ToolResult: what every tool call answers, success or failure."""
from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, Field


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(BaseModel):
    type: Literal["image"] = "image"
    data: str = Field(description="base64")
    media_type: str


ContentBlock = Union[TextBlock, ImageBlock]


class ToolResult(BaseModel):
    """content: a string, or a list of blocks when there is an image. A tool error is a result
    with is_error true and a message that says what to do next, never an exception."""

    content: Union[str, list[ContentBlock]]
    is_error: bool = False
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        """The text of the content, blocks joined (images as a placeholder)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text if isinstance(b, TextBlock) else f"[image {b.media_type}]" for b in self.content)

    @classmethod
    def error(cls, message: str, **meta: Any) -> "ToolResult":
        """An error result; `error_type` (runner.errors.ErrorType) is stored as its plain string."""
        if "error_type" in meta:
            meta["error_type"] = str(meta["error_type"])
        return cls(content=message, is_error=True, meta=meta)
