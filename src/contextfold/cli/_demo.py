"""``contextfold demo``: an agent on a deliberately small window, shown live."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._exceptions import AuthenticationError, ContextfoldError, MissingDependencyError
from ..model import ChatModelBase
from ._demo_files import DemoFiles, bundled_data_dir
from ._demo_model import CacheMeter, build_models, is_local
from ._demo_run import DemoResult, DemoSettings, run_demo
from ._demo_view import DemoView, LiveView, PlainView

__all__ = ["demo"]

_MODEL_HELP = (
    "'local' (the embedded SmolLM2-135M, no key needed), 'local:<path.gguf>', "
    "'openai:<model>' (OPENAI_API_KEY, or --base-url for any OpenAI-compatible server) or "
    "'anthropic:<model>' (ANTHROPIC_API_KEY)."
)
_MIN_STEPS = 5


def _bad(message: str, param: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=param)


def _models(
    spec: str, base_url: str | None, context_size: int, seed: int
) -> tuple[ChatModelBase, ChatModelBase]:
    try:
        return build_models(spec, base_url=base_url, context_size=context_size, seed=seed)
    except MissingDependencyError as exc:
        raise _bad(str(exc), "'--model'") from exc
    except AuthenticationError as exc:
        raise _bad(f"{exc}, or pick another --model (default: local)", "'--model'") from exc
    except (ValueError, FileNotFoundError, ContextfoldError) as exc:
        raise _bad(str(exc), "'--model'") from exc


def _folder(path: Path | None) -> Path:
    folder = bundled_data_dir() if path is None else path
    if not folder.is_dir():
        raise _bad(f"{folder}: no such directory", "'--path'")
    if not DemoFiles.scan(folder).names:
        raise _bad(f"{folder} holds no files to investigate; name a folder with files", "'--path'")
    return folder


def demo(
    model: Annotated[str, typer.Option("--model", "-m", help=_MODEL_HELP)] = "local",
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="An OpenAI-compatible server, with --model openai:<m>."),
    ] = None,
    context_size: Annotated[
        int,
        typer.Option(
            "--context-size",
            "-c",
            min=1536,
            help="The agent's window in tokens; small on purpose, so the context fills fast.",
        ),
    ] = 3072,
    tool_result_limit: Annotated[
        int,
        typer.Option(
            "--tool-result-limit", min=100, help="Tool results above this many tokens are cut."
        ),
    ] = 320,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            file_okay=False,
            help="Investigate this folder instead of the recorded runs shipped with contextfold.",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            file_okay=False,
            help="Offload here (default: a new temporary directory, kept for inspection).",
        ),
    ] = None,
    max_steps: Annotated[
        int,
        typer.Option(
            "--max-steps",
            min=_MIN_STEPS,
            help="Most reasoning steps; the guided plan needs at least 5.",
        ),
    ] = 10,
    guided: Annotated[
        bool,
        typer.Option(
            "--guided/--free",
            help="Force each step's tool (needed by the tiny embedded model) or let the "
            "model choose.",
        ),
    ] = True,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the embedded model's sampling.")] = 0,
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            help="Prepare summaries in the background before the trigger "
            "(ContextConfig.background); the view shows when each was prepared, how long "
            "it took and how long the agent waited for it.",
        ),
    ] = False,
    plain: Annotated[
        bool, typer.Option("--plain", help="Plain line-by-line output even in a terminal.")
    ] = False,
) -> None:
    """Watch an agent work on real files through a small context window.

    Tool results are truncated and offloaded, the context is compressed into a summary,
    and the agent reads offloaded content back; a live view shows the three layers
    (system prompt, summary, context) against the window. Runs on the embedded model
    with no API key.

    Exit code: 0 when the run finished, 1 when it failed, 2 for bad usage (including a
    missing model, extra or key).
    """
    folder = _folder(path)
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="contextfold-demo-"))
    console = Console(highlight=False)
    agent_model, summarizer = _models(model, base_url, context_size, seed)
    settings = DemoSettings(
        folder=folder,
        workdir=workdir,
        context_size=context_size,
        tool_result_limit=tool_result_limit,
        max_steps=max_steps,
        guided=guided,
        background=background,
    )
    view: DemoView = (
        LiveView(console, trigger_ratio=settings.trigger_ratio, model_name=agent_model.model_name)
        if console.is_terminal and not plain
        else PlainView(console)
    )
    console.print(
        f"[bold]contextfold demo[/]: {escape(agent_model.model_name)}, a {context_size:,}-token "
        f"window, tool results cut above {tool_result_limit:,} tokens, compression above "
        f"{settings.trigger_ratio:.0%}; investigating {escape(str(folder))}"
    )
    try:
        result = asyncio.run(run_demo(settings, agent_model, summarizer, view))
    except ContextfoldError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    if summarizer is agent_model:
        label = f"summarizer, the agent's own llama.cpp instance and {context_size:,}-token window"
    else:
        label = f"summarizer, a {summarizer.context_size:,}-token window"
    _report(console, result, local=is_local(model), summarizer_label=label)


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) or "none"


def _report(console: Console, result: DemoResult, *, local: bool, summarizer_label: str) -> None:
    console.print()
    console.print("[bold]Final answer:[/]", escape(result.reply or "(none)"))
    console.print()
    summaries = sum(1 for c in result.compressions if c.method == "summary")
    fallbacks = len(result.compressions) - summaries
    console.print(
        f"[bold]What happened[/] in {result.seconds:.0f}s and {result.steps} step(s): "
        f"{result.truncations} truncation(s), {len(result.compressions)} compression(s) "
        f"({summaries} summarized by the model, {fallbacks} by the truncation fallback), "
        f"{result.readbacks} read-back(s) of offloaded content."
    )
    if result.background:
        applied = [e for e in result.background if e.phase == "applied"]
        dropped = sum(e.phase == "discarded" for e in result.background)
        took = ", ".join(f"{e.duration_s:.1f}s" for e in applied) or "none"
        waited = ", ".join(f"{e.waited_s:.1f}s" for e in applied) or "none"
        console.print(
            f"Background summaries: {len(applied)} applied (took {took}; the agent waited "
            f"{waited} for them), {dropped} discarded. The agent stood still for summaries "
            f"{sum(result.waits):.1f}s in all ({len(result.waits)} compression(s))."
        )
    if result.peak is not None:
        console.print(
            f"Peak input: {result.peak.total:,} of {result.peak.context_size:,} tokens "
            f"({result.peak.ratio:.0%})."
        )
    chosen = [r.step for r in result.records if r.chosen]
    forced = [r.step for r in result.records if not r.chosen]
    console.print(
        f"Chosen by the model: {len(chosen)} step(s) ({_steps(chosen)}): an argument picked "
        f"among valid values from its context, or the tool itself. Forced by the plan: "
        f"{len(forced)} step(s) ({_steps(forced)}): the tool forced and no argument left "
        f"to choose. Read-backs with arguments the model chose: {result.chosen_readbacks} "
        f"of {result.readbacks}. Arguments replaced: none (the grammar allows only valid "
        f"values)."
    )
    _cache_line(console, "agent", result.agent_cache)
    _cache_line(console, summarizer_label, result.summary_cache)
    if not local and result.provider_prompt:
        console.print(
            f"Prompt cache (as the provider reported): {result.provider_cached:,} of "
            f"{result.provider_prompt:,} prompt tokens read from cache."
        )
    table = Table(title=f"Where everything offloaded lives ({result.workdir})")
    table.add_column("kind")
    table.add_column("path", overflow="fold")
    table.add_column("bytes", justify="right")
    for item in result.items:
        table.add_row(item.kind, escape(item.path), f"{item.size:,}")
    console.print(table)
    console.print(
        f"Browse it: contextfold inspect {escape(str(result.workdir))} {result.session_id}"
    )
    missing = [
        name
        for name, count in (
            ("truncation", result.truncations),
            ("compression", len(result.compressions)),
            ("read-back", result.readbacks),
        )
        if not count
    ]
    if missing:
        console.print(
            f"[yellow]note:[/] this run showed no {', no '.join(missing)}; try a smaller "
            "--context-size or --tool-result-limit, or more --max-steps."
        )


def _cache_line(console: Console, who: str, meter: CacheMeter | None) -> None:
    if meter is None or not meter.prompt_tokens:
        return
    if not meter.cached:
        console.print(
            f"KV cache ({who}, {meter.completions} llama.cpp completions): nothing reused; "
            f"{meter.evaluated:,} prompt tokens evaluated in {meter.eval_seconds:.1f}s."
        )
        return
    share = meter.cached / meter.prompt_tokens
    console.print(
        f"KV cache ({who}, {meter.completions} llama.cpp completions): {meter.cached:,} of "
        f"{meter.prompt_tokens:,} prompt tokens served from cache ({share:.0%}); "
        f"{meter.evaluated:,} evaluated in {meter.eval_seconds:.1f}s, so the cache saved "
        f"about {meter.seconds_saved:.0f}s of prompt reading."
    )
