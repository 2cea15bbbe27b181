"""Typed events the context engine emits for every change it makes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

from pydantic import BaseModel

__all__ = [
    "CompressionEvent",
    "ContextEvent",
    "ContextEventHandler",
    "ImageRemovalEvent",
    "TruncationEvent",
    "UsageHintEvent",
]


class CompressionEvent(BaseModel):
    """Older messages were folded into the summary (or dropped, on fallback)."""

    type: Literal["compression"] = "compression"
    trigger: Literal["auto", "manual", "tool", "overflow"]
    method: Literal["summary", "truncation"]
    """``truncation`` when every summary attempt failed and the oldest messages were dropped."""
    tokens_before: int
    tokens_after: int
    messages_removed: int
    messages_kept: int
    duration_s: float
    offload_ref: str | None = None
    """Where the removed messages were offloaded, if an offloader is set."""
    attempts: int = 1
    error: str | None = None
    """The last summary error, when ``method == "truncation"``."""


class TruncationEvent(BaseModel):
    """A tool result was over ``tool_result_limit`` and was cut."""

    type: Literal["truncation"] = "truncation"
    tool_call_id: str
    tool_name: str
    tokens_before: int
    tokens_after: int
    offload_ref: str | None = None


class ImageRemovalEvent(BaseModel):
    """Images over ``max_image_num`` left the context."""

    type: Literal["image_removal"] = "image_removal"
    images_removed: int
    offload_refs: list[str] = []
    tokens_before: int = 0
    """Context tokens before the removal."""
    tokens_after: int = 0


class UsageHintEvent(BaseModel):
    """The model was told its context usage (past the hint threshold)."""

    type: Literal["usage_hint"] = "usage_hint"
    tokens: int
    context_size: int


ContextEvent: TypeAlias = CompressionEvent | TruncationEvent | ImageRemovalEvent | UsageHintEvent

ContextEventHandler: TypeAlias = Callable[[ContextEvent], Awaitable[None] | None]
