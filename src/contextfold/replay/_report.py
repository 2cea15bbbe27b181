"""The replay report: one self-contained HTML page of plotly figures and a table."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._exceptions import MissingDependencyError
from ._files import write_private
from ._metrics import ReplayResult, RunResult, StepUsage

__all__ = ["write_json", "write_report"]

MAX_SELECTABLE_RUNS = 60
"""Runs offered in the per-run figure's menu (the page stays small with hundreds)."""
MAX_OVERLAY_RUNS = 300
"""Runs drawn in the all-runs overlay."""

_COLORS = {
    "total": "#1f77b4",
    "raw": "#7f7f7f",
    "window": "#d62728",
    "compression": "#ff7f0e",
    "truncation": "#9467bd",
    "system": "#8c96c6",
    "summary": "#fdae6b",
    "context": "#74c476",
}


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
        figures.append(_per_run_figure(go, make_subplots, runs, result.context_size))
        figures.append(_overlay_figure(go, runs, result.context_size))
        figures.append(_savings_figure(go, runs))
        if any(r.cost is not None for r in runs):
            figures.append(_cost_figure(go, runs))
        if any(r.timing is not None and r.timing.prepared for r in runs):
            figures.append(_prepared_figure(go, runs))
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


def _per_run_figure(go: Any, make_subplots: Any, runs: list[RunResult], window: int) -> Any:
    shown = runs[:MAX_SELECTABLE_RUNS]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("Request tokens per step", "Request tokens by layer"),
    )
    per_run = 7
    for k, run in enumerate(shown):
        visible = k == 0
        steps = [s.step for s in run.steps]
        compressed = [s for s in run.steps if s.compressions]
        truncated = [s for s in run.steps if s.truncations]
        traces = [
            (_line(go, steps, [s.total for s in run.steps], "with contextfold", "total"), 1),
            (_line(go, steps, [s.raw for s in run.steps], "raw history", "raw", dash="dash"), 1),
            (_markers(go, compressed, "compression", size=11, symbol="triangle-down"), 1),
            (_markers(go, truncated, "truncation", size=9, symbol="x"), 1),
            (
                _line(
                    go,
                    steps,
                    [s.system + s.tools + s.overhead for s in run.steps],
                    "system prompt + tools",
                    "system",
                    stacked=True,
                ),
                2,
            ),
            (
                _line(
                    go, steps, [s.summary for s in run.steps], "summary", "summary", stacked=True
                ),
                2,
            ),
            (
                _line(
                    go, steps, [s.context for s in run.steps], "context", "context", stacked=True
                ),
                2,
            ),
        ]
        for trace, row in traces:
            trace.visible = visible
            trace.legendgroup = trace.name
            fig.add_trace(trace, row=row, col=1)
    for row in (1, 2):
        fig.add_hline(
            y=window,
            line={"color": _COLORS["window"], "dash": "dot"},
            row=row,
            col=1,
            annotation_text=f"window {window:,}",
            annotation_position="top left",
        )
    buttons = []
    for k, run in enumerate(shown):
        mask = [False] * (per_run * len(shown))
        mask[k * per_run : (k + 1) * per_run] = [True] * per_run
        buttons.append({"label": run.run_id, "method": "update", "args": [{"visible": mask}]})
    more = f" (menu: first {len(shown)} of {len(runs)})" if len(runs) > len(shown) else ""
    fig.update_layout(
        title=f"One run, step by step{more}",
        updatemenus=[
            {
                "buttons": buttons,
                "x": 1.0,
                "xanchor": "right",
                "y": 1.13,
                "yanchor": "top",
                "showactive": True,
            }
        ],
        height=720,
        margin={"t": 110},
        legend={"orientation": "h", "y": -0.08},
        template="plotly_white",
    )
    fig.update_xaxes(title_text="step (recorded assistant turn)", row=2, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=2, col=1)
    return fig


def _line(
    go: Any,
    steps: list[int],
    values: list[int],
    name: str,
    color: str,
    *,
    dash: str | None = None,
    stacked: bool = False,
) -> Any:
    """A line of the per-run figure; ``stacked`` lines fill the layer plot below."""
    line = {"color": _COLORS[color]} if dash is None else {"color": _COLORS[color], "dash": dash}
    if stacked:
        return go.Scatter(
            x=steps, y=values, name=name, stackgroup="layers", mode="lines", line=line
        )
    return go.Scatter(x=steps, y=values, name=name, mode="lines", line=line)


def _markers(go: Any, marked: list[StepUsage], name: str, *, size: int, symbol: str) -> Any:
    """Markers on the request total at the steps where ``name`` happened."""
    return go.Scatter(
        x=[s.step for s in marked],
        y=[s.total for s in marked],
        name=name,
        mode="markers",
        marker={"color": _COLORS[name], "size": size, "symbol": symbol},
    )


def _overlay_figure(go: Any, runs: list[RunResult], window: int) -> Any:
    fig = go.Figure()
    for run in runs[:MAX_OVERLAY_RUNS]:
        fig.add_trace(
            go.Scatter(
                x=[s.step for s in run.steps],
                y=[s.total for s in run.steps],
                name=run.run_id,
                mode="lines",
                line={"width": 1},
                opacity=0.55,
                showlegend=False,
                hovertemplate=f"{html.escape(run.run_id)}<br>step %{{x}}: %{{y}} tokens"
                "<extra></extra>",
            )
        )
    marks = [(s.step, s.total) for r in runs[:MAX_OVERLAY_RUNS] for s in r.steps if s.compressions]
    fig.add_trace(
        go.Scatter(
            x=[m[0] for m in marks],
            y=[m[1] for m in marks],
            mode="markers",
            name="compression",
            marker={"color": _COLORS["compression"], "size": 6, "symbol": "triangle-down"},
        )
    )
    fig.add_hline(
        y=window,
        line={"color": _COLORS["window"], "dash": "dot"},
        annotation_text=f"window {window:,}",
    )
    fig.update_layout(
        title=f"Request tokens per step, every run ({min(len(runs), MAX_OVERLAY_RUNS)})",
        xaxis_title="step",
        yaxis_title="tokens",
        height=480,
        template="plotly_white",
    )
    return fig


_COST_PARTS = (
    ("uncached input", "#d62728"),
    ("cache writes", "#ff7f0e"),
    ("cache reads", "#2ca02c"),
    ("output", "#1f77b4"),
)


def _cost_figure(go: Any, runs: list[RunResult]) -> Any:
    """Stacked cost per step (uncached input, cache writes, cache reads, output), summary
    calls counted with the step they precede, compressions marked; a run per menu entry."""
    shown = [r for r in runs if r.cost is not None][:MAX_SELECTABLE_RUNS]
    fig = go.Figure()
    per_run = len(_COST_PARTS) + 1
    for k, run in enumerate(shown):
        assert run.cost is not None
        rates = _rates(run)
        steps = sorted({c.step for c in run.cost.calls})
        totals = {name: dict.fromkeys(steps, 0.0) for name, _ in _COST_PARTS}
        for c in run.cost.calls:
            parts = (c.uncached, c.write, c.read, c.output)
            for (name, _), tokens, rate in zip(_COST_PARTS, parts, rates, strict=True):
                totals[name][c.step] += tokens * rate / 1e6
        for name, color in _COST_PARTS:
            fig.add_trace(
                go.Bar(
                    x=steps,
                    y=[totals[name][s] for s in steps],
                    name=name,
                    marker_color=color,
                    visible=k == 0,
                    legendgroup=name,
                )
            )
        compressed = [s.step for s in run.steps if s.compressions]
        step_cost = {s: sum(totals[n][s] for n, _ in _COST_PARTS) for s in steps}
        fig.add_trace(
            go.Scatter(
                x=compressed,
                y=[step_cost.get(s, 0.0) for s in compressed],
                mode="markers",
                name="compression",
                marker={"color": _COLORS["compression"], "size": 11, "symbol": "triangle-down"},
                visible=k == 0,
            )
        )
    buttons = []
    for k, run in enumerate(shown):
        assert run.cost is not None
        mask = [False] * (per_run * len(shown))
        mask[k * per_run : (k + 1) * per_run] = [True] * per_run
        label = f"{run.run_id} (${run.cost.dollars:.3f})"
        buttons.append({"label": label, "method": "update", "args": [{"visible": mask}]})
    cache = shown[0].cost.cache if shown and shown[0].cost is not None else "none"
    fig.update_layout(
        title=f"Cost per step under the {cache} cache model (summary calls with their step)",
        barmode="stack",
        updatemenus=[{"buttons": buttons, "x": 1.0, "xanchor": "right", "y": 1.15}],
        xaxis_title="step",
        yaxis_title="US dollars",
        height=480,
        template="plotly_white",
    )
    return fig


def _rates(run: RunResult) -> tuple[float, float, float, float]:
    """$/MTok of (uncached input, cache write, cache read, output) the run was priced at."""
    assert run.cost is not None
    r = run.cost.rates
    return r["input"], r["cache_write"], r["cache_read"], r["output"]


def _savings_figure(go: Any, runs: list[RunResult]) -> Any:
    names = [r.run_id for r in runs]
    sent = [sum(s.total for s in r.steps) for r in runs]
    fig = go.Figure(
        [
            go.Bar(x=names, y=sent, name="tokens sent", marker_color=_COLORS["total"]),
            go.Bar(
                x=names,
                y=[r.tokens_saved for r in runs],
                name="tokens saved",
                marker_color=_COLORS["context"],
            ),
        ]
    )
    fig.update_layout(
        barmode="stack",
        title="Input tokens over all steps of each run: sent, and saved against the raw history",
        yaxis_title="tokens (sum over steps)",
        height=480,
        template="plotly_white",
        xaxis={"tickangle": -60, "automargin": True},
    )
    return fig


_OUTCOME_COLORS = {"applied": "#2ca02c", "discarded": "#d62728", "pending": "#7f7f7f"}


def _prepared_figure(go: Any, runs: list[RunResult]) -> Any:
    """Each summary prepared in the background as a bar from its start to ready, per run,
    coloured by what became of it; the agent's wait in its hover text."""
    timed = [r for r in runs if r.timing is not None and r.timing.prepared][:MAX_OVERLAY_RUNS]
    fig = go.Figure()
    for outcome, color in _OUTCOME_COLORS.items():
        rows = [(r, p) for r in timed for p in (r.timing.prepared if r.timing else [])]
        rows = [(r, p) for r, p in rows if p.outcome == outcome]
        if not rows:
            continue
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=[r.run_id for r, _ in rows],
                base=[p.started_s for _, p in rows],
                x=[p.latency_s if p.latency_s is not None else 0.0 for _, p in rows],
                name=outcome,
                marker_color=color,
                customdata=[
                    [p.step, p.waited_s, p.reason or "", p.latency_s or 0.0] for _, p in rows
                ],
                hovertemplate="%{y}<br>started at step %{customdata[0]}, %{base:.1f} s"
                "<br>took %{customdata[3]:.2f} s; the agent waited %{customdata[1]:.2f} s"
                "<br>%{customdata[2]}<extra>" + outcome + "</extra>",
            )
        )
    fig.update_layout(
        title="Summaries prepared in the background: from start to ready (simulated clock)",
        barmode="overlay",
        xaxis_title="simulated seconds since the run's first call",
        height=max(320, 22 * len(timed) + 160),
        template="plotly_white",
        yaxis={"automargin": True},
    )
    return fig


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
