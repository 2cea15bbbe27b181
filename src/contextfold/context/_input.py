"""The model input of one reasoning step, in the spec's three layers."""

from __future__ import annotations

from dataclasses import dataclass

from ..message import Msg, ToolSpec

__all__ = ["ContextUsage", "ModelInput"]


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

    What is counted in :attr:`usage` is exactly what :meth:`messages` sends.
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
