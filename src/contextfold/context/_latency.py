"""How long the next summary will take, from the summaries already timed.

The background compaction starts a summary so that it is ready before the agent would
have to wait for it; that needs the summary's latency before it runs. The last latency
alone is a poor guess: the embedded model's summaries on a loaded machine swung 2-4.5x
from one call to the next, and a summary of a larger snapshot reads more tokens (a model
on a CPU reads a prompt at tens of tokens a second). So the estimate is conservative:
the slowest of the last few summaries, each scaled up to the size of the new input when
that is larger (never down: a small input's time is mostly the summary written, which
does not shrink with it). Every summary the engine times counts, blocking ones too.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["SummaryLatencies"]

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
