"""The replay report's plotly figures: one run's context per step, every run overlaid,
tokens saved, cost, and the summaries prepared in the background."""

from __future__ import annotations

import html
from typing import Any

from ._metrics import RunResult, StepUsage

__all__ = ["cost_figure", "overlay_figure", "per_run_figure", "prepared_figure", "savings_figure"]

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


def per_run_figure(go: Any, make_subplots: Any, runs: list[RunResult], window: int) -> Any:
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


def overlay_figure(go: Any, runs: list[RunResult], window: int) -> Any:
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


def cost_figure(go: Any, runs: list[RunResult]) -> Any:
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


def savings_figure(go: Any, runs: list[RunResult]) -> Any:
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


def prepared_figure(go: Any, runs: list[RunResult]) -> Any:
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
