"""The tables ``contextfold replay`` prints: per run, totals, and compaction timing."""

from __future__ import annotations

from collections import Counter

from rich.table import Table

from ..replay import ReplayResult, RunCost

__all__ = ["runs_table", "timing_table", "totals_table"]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _short(n: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}" if unit != "k" else f"{n / 1e3:.0f}k"
    return f"{n:,.0f}"


def _columns(table: Table, *, cost: bool) -> None:
    # Short headers: the table must stay readable in an 80-column terminal.
    names = ["steps", "peak", "mean", "comp", "trunc", "saved", "offloaded", "prefix"]
    for name in [*names, *(["cost", "cache"] if cost else [])]:
        table.add_column(name, justify="right")


def _cost_cells(cost: RunCost | None) -> list[str]:
    if cost is None:
        return []
    return [f"${cost.dollars:,.3f}", f"read {_pct(cost.cache_read_share)}"]


def runs_table(result: ReplayResult) -> Table:
    table = Table(title=f"Replay at a {result.context_size:,}-token window, per run")
    table.add_column("run", overflow="fold")
    _columns(table, cost=result.totals.cost is not None)
    for r in result.runs:
        table.add_row(
            r.run_id if r.error is None else f"[red]{r.run_id} (failed)[/]",
            str(len(r.steps)),
            f"{r.peak_tokens:,}",
            f"{r.mean_tokens:,.0f}",
            str(r.compressions),
            str(r.truncations),
            _short(r.tokens_saved),
            _short(r.tokens_offloaded),
            _pct(r.prefix_stability),
            *_cost_cells(r.cost),
        )
    return table


def totals_table(result: ReplayResult) -> Table:
    t = result.totals
    table = Table(
        title=f"Total over {t.runs} run(s) ({t.failed} failed) in {t.seconds:.1f}s, "
        f"summarizer {result.summarizer}; raw history prefix stability "
        f"{_pct(t.raw_prefix_stability)}"
    )
    table.add_column("runs", justify="right")
    _columns(table, cost=t.cost is not None)
    table.add_row(
        str(t.runs),
        str(t.steps),
        f"{t.peak_tokens:,}",
        f"{t.mean_tokens:,.0f}",
        str(t.compressions),
        str(t.truncations),
        _short(t.tokens_saved),
        _short(t.tokens_offloaded),
        _pct(t.prefix_stability),
        *_cost_cells(t.cost),
    )
    table.caption = (
        "peak/mean: request tokens; comp/trunc: compressions, truncations; saved: raw "
        "minus sent, summed over steps; prefix: prefix stability"
    )
    if t.cost is not None:
        c = t.cost
        table.caption += (
            f"; cost under the {c.cache} cache model (summary calls ${c.summary_dollars:,.3f} "
            f"of it): input {c.uncached:,} uncached, {c.write:,} written, {c.read:,} read "
            f"(cache read {_pct(c.cache_read_share)}; a perfect prefix cache would read "
            f"{_pct(c.ceiling_share)}), output {c.output:,}"
        )
    return table


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def _reasons(reasons: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or "–"


def timing_table(result: ReplayResult, *, per_run: bool) -> Table:
    """Summaries prepared in the background and the agent's waits, on the simulated clock."""
    t = result.totals
    latency = next((r.timing.summary_latency_s for r in result.runs if r.timing), 0.0)
    table = Table(
        title=f"Compaction timing (simulated clock, summary {latency:g} s per call)",
        caption="prepared/applied/discarded: summaries written in the background; wait: "
        "seconds the agent stood still per automatic compaction",
    )
    for name in ("run", "timed by", "prepared", "applied", "discarded", "why discarded"):
        table.add_column(name, justify="left" if name in ("run", "why discarded") else "right")
    table.add_column("compactions", justify="right")
    table.add_column("wait median", justify="right")
    table.add_column("wait p95", justify="right")
    for r in result.runs if per_run else []:
        if r.timing is None:
            continue
        why = Counter(p.reason or "" for p in r.timing.prepared if p.outcome == "discarded")
        table.add_row(
            r.run_id,
            r.timing.steps_timed,
            str(len(r.timing.prepared)),
            str(r.timing.applied),
            str(r.timing.discarded),
            _reasons(dict(why)),
            str(len(r.timing.waits)),
            _seconds(r.timing.wait_median_s),
            _seconds(r.timing.wait_p95_s),
        )
    table.add_row(
        "[bold]total[/]",
        "",
        str(t.prepared),
        str(t.applied),
        str(t.discarded),
        _reasons(t.discard_reasons),
        str(t.waits),
        _seconds(t.wait_median_s),
        _seconds(t.wait_p95_s),
    )
    return table
