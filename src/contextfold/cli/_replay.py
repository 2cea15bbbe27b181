"""``contextfold replay``: recorded runs through the context engine, measured."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
from ._replay_tables import runs_table, timing_table, totals_table

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
        out.print(runs_table(result))
    out.print(totals_table(result))
    if timing is not None:
        out.print(timing_table(result, per_run=not quiet))
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
