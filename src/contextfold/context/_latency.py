"""How long the next summary will take, from the summaries already timed.

The background compaction starts a summary so that it is ready before the agent would
have to wait for it; that needs the summary's latency before it runs. The last latency
alone is a poor guess: the embedded model's summaries on a loaded machine swung 2-4.5x
from one call to the next, and a summary of a larger snapshot reads more tokens (a model
on a CPU reads a prompt at tens of tokens a second). So the estimate is conservative:
the slowest of the last few summaries, each scaled up to the size of the new input when
that is larger (never down: a small input's time is mostly the summary written, which
does not shrink with it). Every summary the engine times counts, blocking ones too.

Before the first summary none was timed. A summarizer that can measure its own speed
(:class:`MeasuresLatency`: ``ModelSummarizer`` over the embedded model) gives a
:class:`SummaryLatencyModel` instead, measured on this machine before it is needed; others
leave ``BackgroundConfig.assumed_latency_s``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..model import ModelSpeed

if TYPE_CHECKING:
    from ._summarizer import SummaryRequest

__all__ = ["MeasuresLatency", "SummaryLatencies", "SummaryLatencyModel"]

_KEPT = 5
"""Summaries the estimate is the slowest of: enough to remember a slow call among fast
ones across a run's few compactions, few enough to forget a load that has passed."""


@dataclass(frozen=True)
class _Timed:
    seconds: float
    tokens: int
    """The usage the summary started from (0: not known)."""


class SummaryLatencies:
    """The last few summaries' latencies and the input each started from."""

    def __init__(self) -> None:
        self._timed: deque[_Timed] = deque(maxlen=_KEPT)

    def note(self, seconds: float, tokens: int = 0) -> None:
        """One summary took ``seconds``, started from ``tokens`` of usage (0: unknown).
        A negative or non-finite duration is a clock's fault, not a latency: ignored."""
        if math.isfinite(seconds) and seconds >= 0:
            self._timed.append(_Timed(seconds, max(0, tokens)))

    @property
    def last(self) -> float | None:
        """The latest one's seconds; ``None`` until one was noted."""
        return self._timed[-1].seconds if self._timed else None

    def estimate(self, tokens: int = 0) -> float | None:
        """Seconds a summary started from ``tokens`` of usage is expected to take at most:
        the largest of the last few, each times ``tokens`` over its own input when that is
        more (see the module); ``None`` until one was noted."""
        if not self._timed:
            return None
        return max(
            t.seconds * (tokens / t.tokens if t.tokens and tokens > t.tokens else 1.0)
            for t in self._timed
        )


@dataclass(frozen=True)
class SummaryLatencyModel:
    """A summary's latency before any was timed: its model reads ``fixed_tokens`` (the
    instructions, the schema, the framing) and ``per_token`` of its own tokens per token
    of the engine's usage, then writes ``written`` tokens, at ``speed``, measured on this
    machine (:class:`MeasuresLatency`). So the first background summary is started in
    time for a model that takes minutes, not on a constant; the time grows faster than
    the input (``ModelSpeed.depth_cost``), so a later start is not merely proportionally
    later."""

    speed: ModelSpeed
    fixed_tokens: int
    per_token: float
    written: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.per_token) and self.per_token >= 0):
            raise ValueError(f"per_token must be finite and non-negative, got {self}")
        if self.fixed_tokens < 0 or self.written < 0:
            raise ValueError(f"token counts must be non-negative, got {self}")

    def seconds(self, tokens: int) -> float:
        """Seconds a summary of ``tokens`` of usage (the engine's count) is expected to take."""
        read = self.fixed_tokens + round(self.per_token * max(0, tokens))
        return self.speed.seconds(read, self.written)


@runtime_checkable
class MeasuresLatency(Protocol):
    """A summarizer that can time its summaries before writing one (optional beside
    ``Summarizer``): the engine asks once, with background compaction on and no summary
    timed yet, and uses the answer until one is."""

    async def measure_latency(
        self, sample: SummaryRequest, tokens: int
    ) -> SummaryLatencyModel | None:
        """The latency model, or ``None`` when it cannot tell. ``sample``: a summary request
        of the conversation as it is (not to be answered: what a summary would read),
        ``tokens``: the engine's count of its messages (the summarizer's own tokenizer may
        count them differently)."""
        ...
