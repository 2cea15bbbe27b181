"""``contextfold replay``: recorded runs through the context engine, measured."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._exceptions import ContextfoldError, MessageFormatError, MissingDependencyError
from ..context import (
    MIN_TOOL_RESULT_LIMIT,
    BackgroundConfig,
    ContextConfig,
    Redactor,
    Summarizer,
    redact_credentials,
)
from ..replay import (
    FORMATS,
    CacheKind,
    ReadLimits,
    ReplayResult,
    ReplayTiming,
    RequestDump,
    RunCost,
    RunResult,
    Trajectory,
    load_prices,
    load_recordings,
    replay_runs,
    summarizer_from_string,
    write_json,
    write_report,
)
from ..token import TokenCounter, counter_for_model
from ..workspace import BaseWorkspace, LocalWorkspace

__all__ = ["replay"]

_PATHS_HELP = (
    "Recorded runs: mini-swe-agent .traj.json files, JSON lists of OpenAI messages or of "
    "tau-bench runs, JSONL of Msg; directories are searched recursively for *.json and *.jsonl."
)
_SUMMARIZER_HELP = (
    "Who writes summaries: 'extractive' (deterministic, no model; fast), 'none' (empty "
    "fields: only the offload reference and the ledger), 'local' (the embedded model) or "
    "'<provider>:<model>', e.g. 'openai:gpt-4o-mini'."
)


_MIB = 1024 * 1024


def _usage_error(message: str, param: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=param)


def _summarizer(spec: str, base_url: str | None) -> Summarizer:
    try:
        return summarizer_from_string(spec, base_url=base_url)
    except (ValueError, ContextfoldError, FileNotFoundError) as exc:
        raise _usage_error(str(exc), "'--summarizer'") from exc


def _dump(directory: Path | None, format: str) -> RequestDump | None:
    if format not in ("openai", "anthropic"):
        raise _usage_error(
            f"unknown format {format!r}; use 'openai' or 'anthropic'", "'--dump-format'"
        )
    if directory is None:
        return None
    try:
        return RequestDump(directory, format="openai" if format == "openai" else "anthropic")
    except OSError as exc:
        raise _usage_error(f"cannot write to {directory}: {exc}", "'--dump-requests'") from exc


_CACHES: dict[str, CacheKind] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "llama": "llama",
    "none": "none",
}


def _pricing(cache: str, path: Path | None) -> tuple[CacheKind, dict[str, dict[str, Any]]]:
    kind = _CACHES.get(cache)
    if kind is None:
        raise _usage_error(
            f"unknown cache model {cache!r}; use 'anthropic', 'openai', 'llama' or 'none'",
            "'--cache'",
        )
    try:
        return kind, load_prices(path)
    except (OSError, ValueError) as exc:
        raise _usage_error(f"cannot read prices: {exc}", "'--prices'") from exc


def _check_plotly() -> None:
    try:
        import plotly  # noqa: F401
    except ImportError as exc:
        error = MissingDependencyError("plotly", "report")
        raise _usage_error(f"{error} (needed by --report)", "'--report'") from exc


def replay(
    paths: Annotated[
        list[Path], typer.Argument(metavar="PATH", help=_PATHS_HELP, show_default=False)
    ],
    context_size: Annotated[
        int, typer.Option("--context-size", "-c", min=512, help="The window, in tokens.")
    ] = 16_000,
    summarizer: Annotated[
        str, typer.Option("--summarizer", "-s", help=_SUMMARIZER_HELP)
    ] = "extractive",
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="An OpenAI-compatible server for an 'openai:' summarizer."),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", dir_okay=False, help="Write a self-contained HTML report here."),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", dir_okay=False, help="Write every metric, per step, as JSON here."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            file_okay=False,
            help="Offload to files under this directory (browse with 'contextfold inspect'); "
            "by default offloads are kept in memory and discarded.",
        ),
    ] = None,
    tool_result_limit: Annotated[
        int | None,
        typer.Option(
            "--tool-result-limit",
            min=MIN_TOOL_RESULT_LIMIT,
            help="Truncate tool results above this.",
        ),
    ] = None,
    dump_requests: Annotated[
        Path | None,
        typer.Option(
            "--dump-requests",
            file_okay=False,
            help="Write every request (reasoning and summary calls) exactly as it would be "
            "sent, one <run id>.jsonl file per run in this directory.",
        ),
    ] = None,
    dump_format: Annotated[
        str,
        typer.Option(
            "--dump-format", help="Wire form of --dump-requests: 'openai' or 'anthropic'."
        ),
    ] = "openai",
    cache: Annotated[
        str,
        typer.Option(
            "--cache",
            help="Price every call under this provider's prompt cache: 'anthropic' "
            "(explicit breakpoints), 'openai' (automatic prefix), 'llama' (the embedded "
            "model's one-slot KV cache; with --count-as smollm2) or 'none'.",
        ),
    ] = "anthropic",
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            dir_okay=False,
            help="A JSON file of prices and cache rules overriding the shipped ones "
            "(same shape as contextfold/replay/pricing.json).",
        ),
    ] = None,
    tokenizer: Annotated[
        str, typer.Option("--count-as", help="Count tokens as this model does (its tokenizer).")
    ] = "gpt-4o",
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Replay at most this many runs.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the totals only.")] = False,
    recording_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="The recordings' format (" + ", ".join(FORMATS) + "); detected by default.",
        ),
    ] = None,
    max_file_mb: Annotated[
        int,
        typer.Option(
            "--max-file-mb", min=1, help="Refuse a recording larger than this (MiB), unread."
        ),
    ] = ReadLimits.max_bytes // _MIB,
    max_line_mb: Annotated[
        int,
        typer.Option("--max-line-mb", min=1, help="Refuse a JSONL line longer than this (MiB)."),
    ] = ReadLimits.max_line // _MIB,
    max_depth: Annotated[
        int,
        typer.Option("--max-depth", min=1, help="Refuse JSON nested deeper than this."),
    ] = ReadLimits.max_depth,
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            help="Prepare each summary in the background (ContextConfig(background="
            "BackgroundConfig())) and time the run on a simulated clock: report per run the "
            "summaries prepared, applied and discarded (and why), and the agent's wait per "
            "compaction.",
        ),
    ] = False,
    summary_latency: Annotated[
        float | None,
        typer.Option(
            "--summary-latency",
            min=0,
            help="Time the run (simulated clock): each summarizer call takes this many "
            "seconds [default with --background: 5].",
            show_default=False,
        ),
    ] = None,
    step_latency: Annotated[
        float | None,
        typer.Option(
            "--step-latency",
            min=0,
            help="Time the run: seconds from one recorded call to the next where the "
            "recording has no timestamps [default when timed: 5].",
            show_default=False,
        ),
    ] = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Mask credentials (API keys, tokens, passwords) with the shipped redactor "
            "in everything written: offloads and summaries (as ContextConfig(redact=...) "
            "does), --dump-requests, --json and --report.",
        ),
    ] = False,
) -> None:
    """Replay recorded agent runs as if the agent had used contextfold, and measure it.

    Per run and in total: steps, peak and mean request tokens, compressions,
    truncations, tokens saved and offloaded, and prefix stability.

    Exit code: 0 when every run replayed, 1 when a run or an output failed, 2 for bad usage.
    """
    out = Console()
    err = Console(stderr=True)
    if report is not None:
        _check_plotly()
    settings: dict[str, Any] = {}
    if tool_result_limit is not None:
        settings["tool_result_limit"] = tool_result_limit
    if redact:
        settings["redact"] = redact_credentials
    if background:
        settings["background"] = BackgroundConfig()
    config = ContextConfig(**settings)
    timing = None
    if background or summary_latency is not None or step_latency is not None:
        defaults = ReplayTiming()
        timing = ReplayTiming(
            summary_latency_s=defaults.summary_latency_s
            if summary_latency is None
            else summary_latency,
            step_latency_s=defaults.step_latency_s if step_latency is None else step_latency,
        )
    counter = counter_for_model(tokenizer)
    model = _summarizer(summarizer, base_url)
    dump = _dump(dump_requests, dump_format)
    pricing = _pricing(cache, prices)
    limits = ReadLimits(
        max_bytes=max_file_mb * _MIB, max_line=max_line_mb * _MIB, max_depth=max_depth
    )
    try:
        with err.status("Loading recordings..."):
            loaded = load_recordings(paths, format=recording_format, limits=limits)
    except FileNotFoundError as exc:
        raise _usage_error(f"{exc}; check the path", "'PATH'") from exc
    except MessageFormatError as exc:
        raise _usage_error(str(exc), "'PATH'") from exc
    for file, why in loaded.skipped:
        err.print(f"[yellow]skipped[/] {file}: {why}")
    runs = loaded.runs[:limit] if limit is not None else loaded.runs
    if not runs:
        raise _usage_error(
            "no recorded runs found in "
            + ", ".join(str(p) for p in paths)
            + " (expected *.traj.json, *.json or *.jsonl recordings)",
            "'PATH'",
        )
    result = asyncio.run(
        _run(
            runs,
            context_size,
            config,
            (summarizer, model),
            counter,
            workdir,
            err,
            dump,
            pricing,
            timing,
        )
    )
    if not quiet:
        out.print(_runs_table(result))
    out.print(_totals_table(result))
    if timing is not None:
        out.print(_timing_table(result, per_run=not quiet))
    failed = _write_outputs(result, report, json_out, config.redact, out, err)
    fallbacks = result.totals.compression_fallbacks
    if fallbacks:
        err.print(
            f"[yellow]warning:[/] {fallbacks} compression(s) fell back to dropping messages "
            f"because the summarizer failed ({result.summarizer}); see the log for why"
        )
    errors = [r for r in result.runs if r.error is not None]
    for run in errors:
        err.print(f"[bold red]error:[/] {run.run_id} ({run.source}): {run.error}")
    if errors or failed:
        raise typer.Exit(1)


async def _run(
    runs: Sequence[tuple[Trajectory, str]],
    context_size: int,
    config: ContextConfig,
    summarizer: tuple[str, Summarizer],
    counter: TokenCounter,
    workdir: Path | None,
    err: Console,
    dump: RequestDump | None,
    cost: tuple[CacheKind, dict[str, dict[str, Any]]],
    timing: ReplayTiming | None,
) -> ReplayResult:
    workspace: BaseWorkspace | None = None
    if workdir is not None:
        workspace = LocalWorkspace(workdir, fsync=False)
        try:
            await workspace.initialize()
        except OSError as exc:
            err.print(f"[bold red]error:[/] cannot use --workdir {workdir}: {exc}")
            raise typer.Exit(1) from exc
    progress = Progress(
        TextColumn("[bold]replay[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    )
    with progress:
        task = progress.add_task("", total=len(runs))

        def advance(run: RunResult) -> None:
            progress.update(task, advance=1, description=run.run_id)

        return await replay_runs(
            runs,
            context_size=context_size,
            config=config,
            summarizer=summarizer[1],
            summarizer_name=summarizer[0],
            workspace=workspace,
            counter=counter,
            on_run=advance,
            dump=dump,
            cache=cost[0],
            prices=cost[1],
            timing=timing,
        )


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


def _runs_table(result: ReplayResult) -> Table:
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


def _totals_table(result: ReplayResult) -> Table:
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


def _timing_table(result: ReplayResult, *, per_run: bool) -> Table:
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


def _write_outputs(
    result: ReplayResult,
    report: Path | None,
    json_out: Path | None,
    redact: Redactor | None,
    out: Console,
    err: Console,
) -> bool:
    """Write the requested files (``0600``); True when one of them failed."""
    failed = False
    if json_out is not None:
        try:
            write_json(result, json_out, redact=redact)
            out.print(f"metrics written to {json_out}")
        except OSError as exc:
            err.print(f"[bold red]error:[/] cannot write --json {json_out}: {exc}")
            failed = True
    if report is not None:
        try:
            write_report(result, report, redact=redact)
            out.print(f"report written to {report}")
        except OSError as exc:
            err.print(f"[bold red]error:[/] cannot write --report {report}: {exc}")
            failed = True
    return failed
