"""Accounting: what a request with the engine's state costs, counted once per change.

The system prompt's and the tools' counts are cached by value, the per-request overhead is
counted once, and counters without a tokenizer get the correction their calibration
derives from the usage the provider reported (``UsageCalibration``). The context's total
is kept by the engine incrementally; this module adds the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast, overload

from .._structural import implements
from ..message import Msg, ToolSpec
from ..token import TokenCounter, UsageCalibration
from ._config import ContextConfig
from ._types import ContextUsage

__all__ = ["Accounts"]


class Accounts:
    """Token accounts of one engine: system prompt, tools, overhead, calibration."""

    def __init__(self, counter: TokenCounter, context_size: int) -> None:
        self.counter = counter
        self.context_size = context_size
        self.fixed = 0
        """System prompt, tools and framing of the last step."""
        self._system: tuple[str, Msg, int] | None = None
        self._tools: tuple[tuple[ToolSpec, ...], int] | None = None
        self._overhead: int | None = None

    def system(self, system_prompt: str) -> tuple[Msg, int]:
        """The system prompt as a message, and its tokens (both cached by value)."""
        if self._system is None or self._system[0] != system_prompt:
            msg = Msg("system", system_prompt, "system")
            self._system = (system_prompt, msg, self.counter.count_message(msg))
        return self._system[1], self._system[2]

    def tools(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens of the tool schemas (cached by value)."""
        key = tuple(tools)
        if self._tools is None or self._tools[0] != key:
            self._tools = (key, self.counter.count_tools(key))
        return self._tools[1]

    def overhead(self) -> int:
        """Tokens every request costs beyond its messages and tools."""
        if self._overhead is None:
            self._overhead = self.counter.count_request([], ())
        return self._overhead

    def usage(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        summary: Msg | None,
        context: list[Msg],
        context_tokens: int,
    ) -> ContextUsage:
        """The usage of a request with this state; remembers its fixed part."""
        overhead = self.overhead()
        usage = ContextUsage(
            system=self.system(system_prompt)[1],
            summary=self.summary_tokens(summary),
            context=context_tokens,
            tools=self.tools(tools),
            overhead=overhead
            + self._calibration(system_prompt, tools, summary, context, context_tokens),
            context_size=self.context_size,
        )
        self.fixed = usage.system + usage.tools + usage.overhead
        return usage

    def summary_tokens(self, summary: Msg | None) -> int:
        return self.counter.count_message(summary) if summary is not None else 0

    def total(self, summary: Msg | None, context_tokens: int) -> int:
        """The last step's fixed part (uncalibrated) plus this summary and context."""
        system, tools = self._system, self._tools
        fixed = (system[2] if system else 0) + (tools[1] if tools else 0) + (self._overhead or 0)
        return fixed + self.summary_tokens(summary) + context_tokens

    def trigger(self, config: ContextConfig) -> int:
        """Tokens over which a request is compressed."""
        return int(config.trigger_ratio * self.context_size)

    def _calibration(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        summary: Msg | None,
        context: list[Msg],
        context_tokens: int,
    ) -> int:
        # Counters without a tokenizer correct their estimate by the usage the provider
        # reported for the request this one extends; exact counters cost nothing here.
        if not implements(self.counter, UsageCalibration):
            return 0
        system, system_tokens = self.system(system_prompt)
        head = [system] if summary is None else [system, summary]
        estimate = (
            system_tokens
            + self.summary_tokens(summary)
            + context_tokens
            + self.tools(tools)
            + (self._overhead or 0)
        )
        calibration = cast(UsageCalibration, self.counter)
        return calibration.correction(_Joined(head, context), tools, estimate=estimate)


class _Joined(Sequence[Msg]):
    """``head + tail`` without copying: the calibration reads a few positions per step,
    and copying the whole context for that would make a step O(history)."""

    def __init__(self, head: list[Msg], tail: list[Msg]) -> None:
        self._head, self._tail = head, tail

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Msg: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Msg]: ...
    def __getitem__(self, index: int | slice) -> Msg | Sequence[Msg]:
        if isinstance(index, slice):
            return [*self._head, *self._tail][index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        n = len(self._head)
        return self._head[index] if index < n else self._tail[index - n]
