"""Options of cache-preserving compaction (issue 13 §2), each measured; the rule that picks
the defaults.

The 44 recorded SWE-bench runs are replayed through our engine at 16k and 32k windows
with the extractive summarizer and ``tool_result_limit=3000``, once per variant of
``ContextConfig``: the defaults, then one option changed at a time. Every call (reasoning
steps and the summary calls a model summarizer would make in place of the extractive one)
is priced under the Anthropic cache model at Claude Sonnet 4.5's rates, as in figure 5
(``fig_cost``), and the requests as sent are graded for retention by ``_grader``, as in
figure 4 (``fig_retention.replay_graded`` does both in one replay).

The rule (:func:`choose`): among the variants with no call over the window and whose
retention of each kind of fact is not lower than the defaults', the lowest median cost per
run (with several windows: the lowest mean over windows of its median cost relative to the
defaults'; a variant must qualify at every window); a tie on that is broken by the total
cost (the same mean of ratios, on the sum over the runs), and a tie on both keeps the
defaults. The tie-break came in with ``summary_update``: the median run compresses at most
once at either window, so the median cannot tell an option that acts from the second
compaction on.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._common import Options
from ._data import load_swebench
from ._grader import FACT_KINDS, Grade
from .fig_retention import replay_graded

__all__ = ["VARIANTS", "Row", "choose", "run"]

LIMIT = 3000
WINDOWS = (16_000, 32_000)

VARIANTS: tuple[dict[str, Any], ...] = (
    {"summary_request": "prefix"},
    {"summary_request": "transcript"},
    {"summary_update": "rewrite"},
    {"summary_update": "append"},
    {"observation_masking": False},
    {"observation_masking": True},
    {"observation_masking": True, "tool_policies": {"bash": "strip"}},
    {"min_compaction_saving": 0.0},
    {"min_compaction_saving": 0.05},
    {"min_compaction_saving": 0.1},
    {"reserve_ratio": 0.05},
    {"reserve_ratio": 0.1},
    {"reserve_ratio": 0.2},
    {"reserve_ratio": 0.3},
    {"trigger_ratio": 0.8},
    {"trigger_ratio": 0.85},
    {"trigger_ratio": 0.9},
    {"ledger_ratio": 0.03},
    {"ledger_ratio": 0.05},
    {"ledger_ratio": 0.1},
)
"""Changes to ``ContextConfig(tool_result_limit=3000)``, one option at a time; those equal
to the defaults are measured once, as the defaults."""


@dataclass
class Row:
    """One variant at one window, summed over the runs."""

    name: str
    window: int
    costs: list[float] = field(default_factory=list)
    read: int = 0
    input: int = 0
    ceiling: float = 0.0
    """Input tokens a perfect prefix cache would read, over all runs."""
    compressions: int = 0
    summary_calls: int = 0
    over: int = 0
    """Calls (reasoning or summary) larger than the window."""
    grade: Grade = field(default_factory=Grade)

    @property
    def median_cost(self) -> float:
        return statistics.median(self.costs) if self.costs else 0.0

    @property
    def share(self) -> float:
        return self.read / self.input if self.input else 0.0

    @property
    def ceiling_share(self) -> float:
        return self.ceiling / self.input if self.input else 0.0


def _name(change: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in change.items())


def _keeps_retention(row: Row, base: Row) -> bool:
    for kind in FACT_KINDS:
        ours, theirs = row.grade.rate(kind), base.grade.rate(kind)
        if ours is not None and theirs is not None and ours < theirs:
            return False
    return True


def choose(rows: Mapping[int, Sequence[Row]], *, baseline: str) -> tuple[str, dict[str, str]]:
    """The variant the rule picks, and for each variant why it was picked or not.

    ``rows`` maps each window to its rows (the same names at every window). A variant
    qualifies when, at every window, no call was over the window and no kind of fact was
    retained at a lower rate than by ``baseline``; the qualifying one with the lowest mean
    over windows of its median cost per run relative to ``baseline``'s wins, then (on a
    tie) the one with the lowest such mean of its total cost; a tie on both keeps
    ``baseline``.
    """
    bases = {w: next(r for r in rs if r.name == baseline) for w, rs in rows.items()}
    names = [r.name for r in next(iter(rows.values()))]
    why: dict[str, str] = {}
    scores: dict[str, float] = {}
    for name in names:
        at = {w: next(r for r in rs if r.name == name) for w, rs in rows.items()}
        over = [f"{w:,}" for w, r in at.items() if r.over]
        lower = [f"{w:,}" for w, r in at.items() if not _keeps_retention(r, bases[w])]
        if over:
            why[name] = f"calls over the window at {', '.join(over)}"
        elif lower:
            why[name] = f"retention below {baseline} at {', '.join(lower)}"
        else:
            scores[name] = (
                _relative(at, bases, lambda r: r.median_cost),
                _relative(at, bases, lambda r: sum(r.costs)),
            )
    if not scores:
        return baseline, why
    winner = min(scores, key=lambda n: (round(scores[n][0], 9), scores[n][1], n != baseline))
    for name, (median, total) in scores.items():
        verdict = "chosen, " if name == winner else ""
        why[name] = (
            f"{verdict}median cost {100 * (median - 1):+.1f}%, total cost "
            f"{100 * (total - 1):+.1f}% against {baseline}"
        )
    return winner, {name: why[name] for name in names}


def _relative(
    at: Mapping[int, Row], bases: Mapping[int, Row], cost: Callable[[Row], float]
) -> float:
    """The mean over windows of ``cost`` of a variant's row relative to the baseline's."""
    return statistics.fmean(
        cost(r) / cost(bases[w]) if cost(bases[w]) else 1.0 for w, r in at.items()
    )


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _cells(row: Row) -> str:
    g = row.grade
    facts = " | ".join(
        f"{_pct(g.rate(k))} ({g.kept[k]}/{g.facts[k] - g.elsewhere[k]})" for k in FACT_KINDS
    )
    return (
        f"| {row.name} | ${row.median_cost:.3f} | ${sum(row.costs):.2f} | "
        f"{100 * row.share:.1f}% | {100 * row.ceiling_share:.1f}% | {row.compressions} | "
        f"{row.summary_calls} | {row.over} | {facts} | {g.unseen['errors']} |"
    )


async def _measure(name: str, config: Any, window: int, sessions: Sequence[Any]) -> Row:
    from contextfold.context import ExtractiveSummarizer

    row = Row(name, window)
    for session in sessions:
        replayed = await replay_graded(
            session, ExtractiveSummarizer(), window=window, config=config, cache="anthropic"
        )
        cost, result = replayed.result.cost, replayed.result
        assert cost is not None
        row.costs.append(cost.dollars)
        row.read += cost.read
        row.input += cost.input
        row.ceiling += cost.ceiling_share * cost.input
        row.compressions += result.compressions
        row.summary_calls += sum(c.kind == "summary" for c in cost.calls)
        row.over += sum(size > window for size in replayed.sizes)
        row.grade.add(replayed.grade)
    return row


def variants() -> list[tuple[str, Any]]:
    """``(name, config)``: the defaults first, then each change that differs from them."""
    from contextfold.context import ContextConfig

    default = ContextConfig(tool_result_limit=LIMIT)
    out: list[tuple[str, Any]] = [("defaults", default)]
    for change in VARIANTS:
        config = ContextConfig.model_validate({**default.model_dump(), **change})
        if config != default:
            out.append((_name(change), config))
    return out


async def run(opts: Options) -> str:
    sessions = load_swebench(limit=6 if opts.quick else None)
    windows = WINDOWS[:1] if opts.quick else WINDOWS
    rows: dict[int, list[Row]] = {}
    for window in windows:
        rows[window] = [
            await _measure(name, config, window, sessions) for name, config in variants()
        ]
    winner, why = choose(rows, baseline="defaults")
    tables = []
    for window, window_rows in rows.items():
        tables.append(
            f"**{window:,}-token window**\n\n"
            "| variant | median cost per run | total cost | cache read | perfect-prefix "
            "ceiling | compressions | summary calls | calls over the window | paths | "
            "commands | error lines | error lines unseen |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            + "\n".join(_cells(r) for r in window_rows)
        )
    reasons = "\n".join(f"- {name}: {reason}" for name, reason in why.items())
    return (
        "## Options: cache-preserving compaction (issue 13 §2)\n\n"
        f"{len(sessions)} recorded SWE-bench runs, our engine only, extractive summarizer, "
        f"tool_result_limit={LIMIT}, Anthropic cache model at Claude Sonnet 4.5 prices "
        "(`contextfold/replay/pricing.json`); each variant changes one option of the "
        "defaults. Cache read: share of all input tokens (summary calls included) read from "
        "the cache; ceiling: a perfect prefix cache. Compressions count summaries and "
        "masking batches. Retention: facts of the compressed spans kept in the summary of "
        "the next request / graded (figure 4's grader); error lines unseen: error lines of "
        "compressed spans that the request before the compression no longer held (cut by "
        "truncation or masked), not graded.\n\n"
        + "\n\n".join(tables)
        + f"\n\nChosen by the rule: **{winner}**.\n\n"
        + reasons
        + "\n"
    )
