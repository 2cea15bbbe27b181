"""What a replay measures, per step, per run and in total.

Definitions (all in tokens of the replay's counter, exact ``o200k_base`` by default):

* **request total** of a step: ``ModelInput.usage.total``, everything the model would
  have been sent for that recorded assistant turn: system prompt, summary, context, tool
  definitions and the reply priming. Peak and mean are over steps.
* **raw** of a step: the request the recorded history would cost at the same step with
  no context management: the same system prompt, tools and priming plus every recorded
  message before the turn, uncut. It may exceed the window: the recording may come from a
  model with a larger one.
* **tokens saved**: ``sum over steps of (raw - request total)``. Each step counts, since
  each request is paid for; it can be slightly negative on a run that never compresses,
  by the cost of the usage notes the engine adds past the hint threshold.
* **tokens offloaded**: tokens of everything written to the workspace: the compressed or
  dropped messages (``count_message`` each) and the whole text of every truncated tool
  result.
* **wait per compaction** (timed replays, ``ReplayTiming``): simulated seconds the agent
  spent in the step that compacted, beyond its recorded call: the summarizer's latency
  for a compaction at the trigger, what was left of it for one prepared in the background.
* **prefix stability** of a step: tokens of the longest common prefix of this request and
  the previous one, at message granularity (the same message objects, in the same order,
  with the same tool definitions in front), divided by the request total. The first step
  of a run has no previous request and is left out. Per run and in total it is
  token-weighted, ``sum(shared) / sum(request total)`` over those steps: the share of
  input tokens a provider's prompt cache could serve, which is what it bills on.
  ``raw_prefix_stability`` is the same for the raw history, which only ever appends.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, computed_field

from ._cost import RunCost

__all__ = [
    "PreparedSummary",
    "ReplayResult",
    "ReplayTotals",
    "RunResult",
    "RunTiming",
    "StepUsage",
    "percentile",
]


class StepUsage(BaseModel):
    """The request of one recorded assistant turn, per layer."""

    step: int
    """0-based index of the assistant turn in the run."""
    message_index: int
    """Index of the assistant message in the recording (system prompt excluded)."""
    system: int
    tools: int
    overhead: int
    summary: int
    context: int
    total: int
    raw: int
    shared_prefix: int
    """Tokens shared with the previous request's prefix (0 on the first step)."""
    raw_shared_prefix: int
    compressions: int = 0
    """Compressions that shaped this request (since the previous step)."""
    truncations: int = 0
    """Tool results truncated since the previous step."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0..1) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class PreparedSummary(BaseModel):
    """One summary prepared in the background during a timed replay."""

    step: int
    """The step whose request started it."""
    started_s: float
    """Simulated seconds since the run's first call."""
    latency_s: float | None = None
    """From start to ready; ``None`` if it never was."""
    waited_s: float = 0.0
    """How long the agent waited for it."""
    outcome: Literal["applied", "discarded", "pending"] = "pending"
    reason: str | None = None
    """Why it was discarded."""


class RunTiming(BaseModel):
    """A timed replay of one run (``ReplayTiming``): the agent's waits for its summaries."""

    summary_latency_s: float
    steps_timed: Literal["timestamps", "stated", "mixed"] = "stated"
    """Where the time between calls came from: the recording, ``step_latency_s``, or
    both (where the recording has no time for a call)."""
    seconds: float = 0.0
    """Simulated time from the first call to the last, waits included."""
    waits: list[float] = []
    """Per automatic compaction, the seconds the agent waited in that step."""
    prepared: list[PreparedSummary] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def applied(self) -> int:
        """Prepared summaries swapped in."""
        return sum(p.outcome == "applied" for p in self.prepared)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def discarded(self) -> int:
        """Prepared summaries dropped (see each one's ``reason``)."""
        return sum(p.outcome == "discarded" for p in self.prepared)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def wait_median_s(self) -> float | None:
        """Median wait per compaction."""
        return statistics.median(self.waits) if self.waits else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def wait_p95_s(self) -> float | None:
        """95th percentile wait per compaction (nearest rank)."""
        return percentile(self.waits, 0.95)


def _weighted(shared: Sequence[int], totals: Sequence[int]) -> float | None:
    denominator = sum(totals)
    return None if denominator == 0 else sum(shared) / denominator


class RunResult(BaseModel):
    """One replayed run: its steps, events and derived metrics."""

    run_id: str
    source: str
    format: str
    context_size: int
    steps: list[StepUsage] = []
    compressions: int = 0
    compression_fallbacks: int = 0
    """Compressions that dropped messages because the summary failed."""
    truncations: int = 0
    tokens_offloaded: int = 0
    items_offloaded: int = 0
    seconds: float = 0.0
    error: str | None = None
    """Why the replay stopped early, if it did (the steps before it are kept)."""
    cost: RunCost | None = None
    """What the run's calls cost under the chosen cache model (``--cache``)."""
    timing: RunTiming | None = None
    """The agent's waits for its summaries, in a timed replay (``ReplayTiming``)."""

    def redacted(self, redact: Callable[[str], str]) -> RunResult:
        """This result with its texts (id, source, error) passed through ``redact``."""
        error = None if self.error is None else redact(self.error)
        return self.model_copy(
            update={"run_id": redact(self.run_id), "source": redact(self.source), "error": error}
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_tokens(self) -> int:
        """Largest request total."""
        return max((s.total for s in self.steps), default=0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_tokens(self) -> float:
        """Mean request total."""
        return sum(s.total for s in self.steps) / len(self.steps) if self.steps else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def raw_peak_tokens(self) -> int:
        """Largest raw request."""
        return max((s.raw for s in self.steps), default=0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_saved(self) -> int:
        """Sum over steps of raw minus request total."""
        return sum(s.raw - s.total for s in self.steps)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefix_stability(self) -> float | None:
        """Token-weighted share of each request found in the previous one's prefix."""
        later = self.steps[1:]
        return _weighted([s.shared_prefix for s in later], [s.total for s in later])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def raw_prefix_stability(self) -> float | None:
        """The same for the raw history."""
        later = self.steps[1:]
        return _weighted([s.raw_shared_prefix for s in later], [s.raw for s in later])


class ReplayTotals(BaseModel):
    """The metrics over every run."""

    runs: int
    failed: int
    steps: int
    peak_tokens: int
    mean_tokens: float
    raw_peak_tokens: int
    compressions: int
    compression_fallbacks: int
    truncations: int
    tokens_saved: int
    tokens_offloaded: int
    prefix_stability: float | None
    raw_prefix_stability: float | None
    seconds: float
    cost: RunCost | None = None
    """Every run's calls together, when a cache model was chosen."""
    prepared: int = 0
    """Summaries prepared in the background (timed replays)."""
    applied: int = 0
    discarded: int = 0
    discard_reasons: dict[str, int] = {}
    waits: int = 0
    """Automatic compactions timed."""
    wait_median_s: float | None = None
    wait_p95_s: float | None = None

    @classmethod
    def of(cls, runs: Sequence[RunResult]) -> ReplayTotals:
        """Totals of ``runs`` (step-weighted mean, token-weighted stability)."""
        steps = [s for r in runs for s in r.steps]
        timed = [r.timing for r in runs if r.timing is not None]
        prepared = [p for t in timed for p in t.prepared]
        waits = [w for t in timed for w in t.waits]
        later = [s for r in runs for s in r.steps[1:]]
        return cls(
            runs=len(runs),
            failed=sum(r.error is not None for r in runs),
            steps=len(steps),
            peak_tokens=max((s.total for s in steps), default=0),
            mean_tokens=sum(s.total for s in steps) / len(steps) if steps else 0.0,
            raw_peak_tokens=max((s.raw for s in steps), default=0),
            compressions=sum(r.compressions for r in runs),
            compression_fallbacks=sum(r.compression_fallbacks for r in runs),
            truncations=sum(r.truncations for r in runs),
            tokens_saved=sum(r.tokens_saved for r in runs),
            tokens_offloaded=sum(r.tokens_offloaded for r in runs),
            prefix_stability=_weighted([s.shared_prefix for s in later], [s.total for s in later]),
            raw_prefix_stability=_weighted(
                [s.raw_shared_prefix for s in later], [s.raw for s in later]
            ),
            seconds=sum(r.seconds for r in runs),
            cost=_total_cost(runs),
            prepared=len(prepared),
            applied=sum(p.outcome == "applied" for p in prepared),
            discarded=sum(p.outcome == "discarded" for p in prepared),
            discard_reasons=dict(
                Counter(p.reason or "" for p in prepared if p.outcome == "discarded")
            ),
            waits=len(waits),
            wait_median_s=statistics.median(waits) if waits else None,
            wait_p95_s=percentile(waits, 0.95),
        )


def _total_cost(runs: Sequence[RunResult]) -> RunCost | None:
    costs = [r.cost for r in runs if r.cost is not None]
    if not costs:
        return None
    return RunCost(
        cache=costs[0].cache,
        calls=[c for cost in costs for c in cost.calls],
        rates=costs[0].rates,
    )


class ReplayResult(BaseModel):
    """Every replayed run, the settings used, and the totals."""

    context_size: int
    summarizer: str
    counter: str
    """The token counter's name, e.g. ``openai-chat/o200k_base``."""
    runs: list[RunResult]

    def redacted(self, redact: Callable[[str], str] | None) -> ReplayResult:
        """This result with every run's texts passed through ``redact`` (what ``--json``
        and the report write); itself when ``redact`` is ``None``."""
        if redact is None:
            return self
        return self.model_copy(update={"runs": [r.redacted(redact) for r in self.runs]})

    @computed_field  # type: ignore[prop-decorator]
    @property
    def totals(self) -> ReplayTotals:
        """Metrics over every run."""
        return ReplayTotals.of(self.runs)
