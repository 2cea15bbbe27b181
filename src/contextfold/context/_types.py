"""The engine's values: the model input it builds, its usage, and the events it emits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import BaseModel

from ..message import HintBlock, Msg, ToolSpec
from ._config import ContextConfig

__all__ = [
    "BackgroundCompactionEvent",
    "CompressionEvent",
    "CompressionHook",
    "CompressionRequest",
    "CompressionTrigger",
    "ContextEvent",
    "ContextEventHandler",
    "ContextUsage",
    "ImageRemovalEvent",
    "ModelInput",
    "TruncationEvent",
    "UsageHintEvent",
]

CompressionTrigger: TypeAlias = Literal["auto", "manual", "tool", "overflow", "idle"]
"""Why a compression ran: over the trigger before a step (``auto``), asked for by code
(``manual``), by the agent's ``CompressContext`` tool (``tool``), or after the provider
reported the window exceeded (``overflow``), or between turns ahead of a likely trigger,
while the provider's prompt cache is still warm (``idle``)."""


@dataclass(frozen=True)
class ContextUsage:
    """Token usage of a model input, per layer."""

    system: int
    summary: int
    context: int
    tools: int
    overhead: int
    """Reply priming and any other per-request cost; for counters calibrated by reported
    usage, also their correction (which may be negative: estimators err high)."""
    context_size: int

    @property
    def total(self) -> int:
        """All input tokens of the request."""
        return self.system + self.summary + self.context + self.tools + self.overhead

    @property
    def ratio(self) -> float:
        """``total / context_size``."""
        return self.total / self.context_size


@dataclass(frozen=True)
class ModelInput:
    """System prompt, then the summary if any, then the context; built once per step.

    The three layers of context-management.zh, section 概述 (Overview). What is counted
    in :attr:`usage` is exactly what :meth:`messages` sends.
    """

    system: Msg
    summary: Msg | None
    context: tuple[Msg, ...]
    tools: tuple[ToolSpec, ...]
    usage: ContextUsage

    def messages(self) -> list[Msg]:
        """The messages to send, in order."""
        head = [self.system] if self.summary is None else [self.system, self.summary]
        return [*head, *self.context]


@dataclass(frozen=True)
class CompressionRequest:
    """One compression about to run; a :data:`CompressionHook` may change it.

    ``threshold_ratio`` defaults to ``config.trigger_ratio`` (the ``CompressContext`` tool
    passes ``config.hint_ratio``); ``force`` compresses below the threshold too.
    """

    trigger: CompressionTrigger
    config: ContextConfig
    instructions: HintBlock | None = None
    force: bool = False
    threshold_ratio: float | None = None


class CompressionEvent(BaseModel):
    """Older messages were folded into the summary (or dropped, on fallback)."""

    type: Literal["compression"] = "compression"
    trigger: CompressionTrigger
    method: Literal["summary", "truncation", "masking"]
    """``masking`` when old tool results were replaced by placeholders (no summary);
    ``truncation`` when every summary attempt failed and the oldest messages were dropped."""
    tokens_before: int
    tokens_after: int
    messages_removed: int
    messages_kept: int
    duration_s: float
    offload_ref: str | None = None
    """Where the removed messages were offloaded, if an offloader is set."""
    attempts: int = 1
    """Summary attempts made (all of them, when the summary failed)."""
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


class BackgroundCompactionEvent(BaseModel):
    """A compaction prepared in the background (``ContextConfig.background``) changed
    phase: ``started`` (a snapshot is being summarized), ``ready`` (its outcome waits for
    the trigger), ``applied`` (swapped in at the trigger; ``waited_s`` is how long the
    agent waited for it) or ``discarded`` (it no longer applies, failed, or was dropped)."""

    type: Literal["background_compaction"] = "background_compaction"
    phase: Literal["started", "ready", "applied", "discarded"]
    duration_s: float = 0.0
    """Since it started."""
    waited_s: float = 0.0
    """How long ``prepare`` waited for it (``applied``, and ``discarded`` after a wait)."""
    reason: str | None = None
    """Why it was discarded."""
    cause: Literal["usage", "idle"] = "usage"
    """What started it: usage past ``start_ratio``, or an idle agent whose next turn would
    likely cross the trigger (started before the provider's prompt cache expires)."""


ContextEvent: TypeAlias = (
    CompressionEvent
    | TruncationEvent
    | ImageRemovalEvent
    | UsageHintEvent
    | BackgroundCompactionEvent
)

ContextEventHandler: TypeAlias = Callable[[ContextEvent], Awaitable[None] | None]
"""Receives every event; may be sync or async."""

CompressionHook: TypeAlias = Callable[
    [CompressionRequest, Callable[[CompressionRequest], Awaitable[CompressionEvent | None]]],
    Awaitable[CompressionEvent | None],
]
"""Wraps every compression the engine runs, automatic ones included:
``async def hook(request, call_next)`` may change the request, skip the compression (by not
calling ``call_next``) or observe its event. The agent runs its ``on_compression``
middleware through it."""
