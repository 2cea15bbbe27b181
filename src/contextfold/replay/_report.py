"""The replay report: one self-contained HTML page of plotly figures and a table."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._exceptions import MissingDependencyError
from ._files import write_private
from ._metrics import ReplayResult
from ._report_figures import (
    cost_figure,
    overlay_figure,
    per_run_figure,
    prepared_figure,
    savings_figure,
)

__all__ = ["write_json", "write_report"]


def _plotly() -> tuple[Any, Any]:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError as exc:
        raise MissingDependencyError("plotly", "report") from exc
    return go, make_subplots


def write_json(
    result: ReplayResult, path: str | Path, *, redact: Callable[[str], str] | None = None
) -> Path:
    """Write ``result``, every metric per step, as JSON (what ``replay --json`` writes):
    ``0600``, a folder created for it ``0700``; with ``redact``, the runs' texts (ids,
    sources, errors) pass it first."""
    path = Path(path)
    write_private(path, result.redacted(redact).model_dump_json(indent=1))
    return path


def write_report(
    result: ReplayResult,
    path: str | Path,
    *,
    title: str = "",
    redact: Callable[[str], str] | None = None,
) -> Path:
    """Write ``result`` as one HTML page with plotly's JavaScript inlined (works offline).

    Figures: context tokens per step for a selectable run, with the raw history, the
    window and compressions marked, above the same steps as stacked layers (system prompt
    and tools / summary / context); every run's request total overlaid; tokens sent and
    saved per run. Then the per-run table with totals, and the metric definitions.
    The file is ``0600`` (a folder created for it ``0700``); with ``redact``, the runs'
    texts (ids, sources, errors) pass it first. Raises ``MissingDependencyError`` when
    plotly (the ``report`` extra) is missing.
    """
    go, make_subplots = _plotly()
    path = Path(path)
    result = result.redacted(redact)
    runs = [r for r in result.runs if r.steps]
    figures: list[Any] = []
    if runs:
        figures.append(per_run_figure(go, make_subplots, runs, result.context_size))
        figures.append(overlay_figure(go, runs, result.context_size))
        figures.append(savings_figure(go, runs))
        if any(r.cost is not None for r in runs):
            figures.append(cost_figure(go, runs))
        if any(r.timing is not None and r.timing.prepared for r in runs):
            figures.append(prepared_figure(go, runs))
    parts = [
        fig.to_html(
            full_html=False,
            include_plotlyjs=(i == 0),
            config={"displaylogo": False, "responsive": True},
            default_width="100%",
        )
        for i, fig in enumerate(figures)
    ]
    heading = title or f"contextfold replay: {len(result.runs)} run(s)"
    page = _PAGE.format(
        title=html.escape(heading),
        settings=html.escape(
            f"window {result.context_size:,} tokens · summarizer {result.summarizer} · "
            f"counter {result.counter}"
        ),
        figures="\n".join(f'<div class="figure">{p}</div>' for p in parts)
        or "<p>No run had an assistant turn to replay.</p>",
        table=_table(result),
        timing=_timing_section(result),
    )
    write_private(path, page)
    return path


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _timing_section(result: ReplayResult) -> str:
    """The timed replay's table: per run, each prepared summary and the agent's waits."""
    timed = [r for r in result.runs if r.timing is not None]
    if not timed:
        return ""
    head = (
        "<tr><th>run</th><th>timed by</th><th>compactions</th><th>wait median (s)</th>"
        "<th>wait p95 (s)</th><th>prepared</th><th>applied</th><th>discarded</th>"
        "<th>each prepared summary: step, started (s), took (s), agent waited (s), outcome"
        "</th></tr>"
    )
    rows = []
    for r in timed:
        assert r.timing is not None
        t = r.timing
        each = "; ".join(
            f"step {p.step}: at {p.started_s:.1f}, took {_seconds(p.latency_s)}, "
            f"waited {p.waited_s:.2f}, {p.outcome}" + (f" ({p.reason})" if p.reason else "")
            for p in t.prepared
        )
        rows.append(
            f"<tr><td>{html.escape(r.run_id)}</td><td>{t.steps_timed}</td>"
            f"<td>{len(t.waits)}</td><td>{_seconds(t.wait_median_s)}</td>"
            f"<td>{_seconds(t.wait_p95_s)}</td><td>{len(t.prepared)}</td><td>{t.applied}</td>"
            f"<td>{t.discarded}</td><td class='each'>{html.escape(each)}</td></tr>"
        )
    totals = result.totals
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(totals.discard_reasons.items()))
    latency = timed[0].timing.summary_latency_s if timed[0].timing else 0.0
    rows.append(
        "<tr class='total'><td>total</td><td></td>"
        f"<td>{totals.waits}</td><td>{_seconds(totals.wait_median_s)}</td>"
        f"<td>{_seconds(totals.wait_p95_s)}</td><td>{totals.prepared}</td>"
        f"<td>{totals.applied}</td><td>{totals.discarded}</td>"
        f"<td class='each'>{html.escape(reasons)}</td></tr>"
    )
    return (
        "<h2>Compaction timing</h2>"
        f"<p>Simulated clock: each summary takes {latency:g} s; the time between recorded "
        "calls comes from the recording's timestamps or the stated latency per call. "
        "<em>wait</em> is how long the agent stood still in a step that compacted.</p>"
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _table(result: ReplayResult) -> str:
    head = (
        "<tr><th>run</th><th>steps</th><th>peak</th><th>mean</th><th>raw peak</th>"
        "<th>compressions</th><th>truncations</th><th>tokens saved</th>"
        "<th>tokens offloaded</th><th>prefix stability</th><th>raw prefix stability</th>"
        "<th>error</th></tr>"
    )
    rows = []
    for r in result.runs:
        rows.append(
            "<tr>"
            f"<td title='{html.escape(r.source, quote=True)}'>{html.escape(r.run_id)}</td>"
            f"<td>{len(r.steps)}</td><td>{r.peak_tokens:,}</td><td>{r.mean_tokens:,.0f}</td>"
            f"<td>{r.raw_peak_tokens:,}</td><td>{r.compressions}</td><td>{r.truncations}</td>"
            f"<td>{r.tokens_saved:,}</td><td>{r.tokens_offloaded:,}</td>"
            f"<td>{_pct(r.prefix_stability)}</td><td>{_pct(r.raw_prefix_stability)}</td>"
            f"<td>{html.escape(r.error or '')}</td></tr>"
        )
    t = result.totals
    rows.append(
        "<tr class='total'><td>total</td>"
        f"<td>{t.steps}</td><td>{t.peak_tokens:,}</td><td>{t.mean_tokens:,.0f}</td>"
        f"<td>{t.raw_peak_tokens:,}</td><td>{t.compressions}</td><td>{t.truncations}</td>"
        f"<td>{t.tokens_saved:,}</td><td>{t.tokens_offloaded:,}</td>"
        f"<td>{_pct(t.prefix_stability)}</td><td>{_pct(t.raw_prefix_stability)}</td>"
        f"<td>{t.failed} failed</td></tr>"
    )
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px;
        padding: 0 1em; color: #222; }}
.figure {{ margin-bottom: 1.5em; }}
table {{ border-collapse: collapse; font-size: 0.85em; width: 100%; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
tr.total td {{ font-weight: bold; border-top: 2px solid #444; }}
dt {{ font-weight: bold; margin-top: 0.5em; }}
td.each {{ text-align: left; font-size: 0.9em; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>{settings}</p>
{figures}
<h2>Runs</h2>
{table}
{timing}
<h2>What the numbers mean</h2>
<dl>
<dt>step</dt><dd>one recorded assistant turn: the request the model would have been sent.</dd>
<dt>peak / mean</dt><dd>largest and mean request total: system prompt, summary, context,
tool definitions and reply priming, counted exactly.</dd>
<dt>raw</dt><dd>the same request from the recorded history with no context management.</dd>
<dt>tokens saved</dt><dd>sum over steps of raw minus the request total.</dd>
<dt>tokens offloaded</dt><dd>tokens of the messages and whole tool results written to the
workspace.</dd>
<dt>prefix stability</dt><dd>tokens of the longest common message prefix with the previous
request (tool definitions included) over the request total, token-weighted over every
step but the first: the share a provider's prompt cache could serve.</dd>
</dl>
</body>
</html>
"""
