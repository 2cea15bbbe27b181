"""How long the agent waits for a compaction: at the trigger (blocking) or prepared in the
background (``ContextConfig(background=BackgroundConfig())``), issue 30.

Our real ``Agent`` runs one long reply: a scripted model that takes ``--step`` seconds per
call and asks for a log each step (about 300 tokens of output per result), a 16,000-token
window, and a model summarizer (``ModelSummarizer`` over a scripted model) that takes
``--summary`` seconds per call (5 s by default). The agent's wait per compaction is read from
the engine's events: for a blocking compaction, its ``duration_s`` (the step stood still
for it); for a prepared one, ``waited_s`` when it was applied (plus the duration of any
compaction that then ran the usual way). Both rows run the same script side by side; the
wall time of the whole reply is reported too.

Run: ``python -m benchmarks.background_compaction [--steps 80] [--step 0.5] [--summary 5]``.

``--summarizer local`` writes the summaries with the embedded model instead (SmolLM2-135M
by llama.cpp, a ``ModelSummarizer`` over ``LocalChatModel`` as ``contextfold demo`` builds
it: 400 tokens of output at most, two attempts) while the agent's model stays scripted with
its step time; ``--window`` sets the agent's window (the summarizer's is 8,192, SmolLM2's
trained window). Its latency is then whatever llama.cpp takes on this machine: every
summary call is timed (``TimedSummarizer``) in the same run, and the waits are reported as
a share of that run's median summary latency.

``--replay`` instead replays the 44 recorded SWE-bench runs at a 16,000-token window with
the extractive summarizer, blocking and in the background, each timed on the replay's
simulated clock (``ReplayTiming``: the time between calls from the recordings' timestamps,
each summary ``--summary`` seconds), priced under the Anthropic cache model, and every
request graded by ``retention_whole_run``'s rules (``_whole_run``). Parity: retention and
needed-fact coverage within ``--retention-tolerance`` points of blocking, cost within
``--cost-tolerance`` of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.agent import Agent
from contextfold.context import (
    BackgroundCompactionEvent,
    BackgroundConfig,
    CompressionEvent,
    ContextConfig,
    ContextEvent,
    MeasuresLatency,
    ModelSummarizer,
    Summarizer,
    SummaryLatencyModel,
    SummaryRequest,
    SummaryResult,
)
from contextfold.message import ToolCallBlock
from contextfold.middleware import AgentView, Middleware
from contextfold.model import ScriptedModel, ScriptedRequest
from contextfold.tool import FunctionTool, Toolkit

T0 = time.monotonic()
"""The benchmark's start: summary calls are printed with their start since then."""
WINDOW = 16_000
REPLAY_WINDOW = 16_000
LOCAL_WINDOW = 8_192
FIELDS = {
    "task_overview": "Read the service logs and report the errors.",
    "current_state": "Logs read so far; errors noted.",
    "important_discoveries": "Errors E*7 in src/svc*/mod*.py:42.",
    "next_steps": "Read the next logs.",
    "context_to_preserve": "Paths src/svc*/mod*.py.",
}


@dataclass
class Recorder(Middleware):
    """The engine's events, as the agent's middleware sees them."""

    events: list[ContextEvent] = field(default_factory=list)

    async def on_context_event(self, event: ContextEvent, agent: AgentView) -> None:
        self.events.append(event)


LINES = 40
"""Lines per log (about 17 tokens each); ``--lines`` sets it."""


def read_log(n: int) -> str:
    """Read log number ``n``.

    Args:
        n: Which log.
    """
    return "\n".join(
        f"log {n} line {i}: GET /api/v{i % 3}/items status {200 if i % 17 else 500}"
        for i in range(LINES)
    )


@dataclass
class TimedSummarizer:
    """A summarizer whose every call is timed: the summary latency of this very run
    (the embedded model's depends on the machine and its load), and its failures."""

    inner: Summarizer
    latencies: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    """When each call started, seconds since the benchmark started (do rows overlap?)."""
    failures: int = 0
    measured: list[tuple[SummaryLatencyModel, int]] = field(default_factory=list)
    """The summarizer's own measures of its latency (``MeasuresLatency``), each with the
    sample's tokens, and how long measuring took."""
    measuring_s: float = 0.0

    async def measure_latency(
        self, sample: SummaryRequest, tokens: int
    ) -> SummaryLatencyModel | None:
        """The inner summarizer's measure (the embedded model's), passed on and noted."""
        if not isinstance(self.inner, MeasuresLatency):
            return None
        started = time.monotonic()
        measured = await self.inner.measure_latency(sample, tokens)
        self.measuring_s += time.monotonic() - started
        if measured is not None:
            self.measured.append((measured, tokens))
        return measured

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        started = time.monotonic()
        self.starts.append(started - T0)
        try:
            return await self.inner.summarize(request)
        except Exception:
            self.failures += 1
            raise
        finally:
            self.latencies.append(time.monotonic() - started)


def scripted_summarizer(summary_s: float, window: int) -> Summarizer:
    """A ``ModelSummarizer`` over a scripted model that answers after ``summary_s``."""

    async def summary_reply(request: ScriptedRequest) -> Any:
        await asyncio.sleep(summary_s)
        return FIELDS

    return ModelSummarizer(ScriptedModel(summary_reply, context_size=window))


def local_summarizer() -> Summarizer:
    """The embedded model's summarizer, as ``contextfold demo`` builds it (its own
    llama.cpp instance here: the agent's model is scripted)."""
    from contextfold.model import LocalChatModel

    return ModelSummarizer(LocalChatModel(None, context_size=8192, max_tokens=400), attempts=2)


def waits(events: list[ContextEvent]) -> tuple[list[float], int, int]:
    """Per compaction the agent's wait in seconds; how many were prepared, discarded."""
    found: list[float] = []
    applied_wait: float | None = None
    prepared = discarded = 0
    for event in events:
        if isinstance(event, BackgroundCompactionEvent):
            if event.phase == "applied":
                applied_wait = event.waited_s
                prepared += 1
            elif event.phase == "discarded":
                discarded += 1
        elif isinstance(event, CompressionEvent) and event.trigger == "auto":
            if applied_wait is not None:
                found.append(applied_wait)
                applied_wait = None
            else:
                found.append(event.duration_s)
    return found, prepared, discarded


async def run(
    steps: int,
    step_s: float,
    summary_s: float,
    background: bool,
    background_config: BackgroundConfig | None = None,
    *,
    window: int = WINDOW,
    summarizer: Callable[[], Summarizer] | None = None,
) -> dict[str, Any]:
    async def agent_reply(request: ScriptedRequest) -> Any:
        await asyncio.sleep(step_s)
        made = sum(len(m.tool_calls) for m in request.messages)
        if made >= steps:
            return "Done: errors 500 in every log."
        return [ToolCallBlock(id=f"c{made}", name="read_log", input={"n": made})]

    timed = TimedSummarizer(
        summarizer() if summarizer is not None else scripted_summarizer(summary_s, window)
    )
    recorder = Recorder()
    config = ContextConfig(
        background=(background_config or BackgroundConfig()) if background else None
    )
    agent = Agent(
        name="bench",
        system_prompt="Read the logs one by one and report the errors.",
        model=ScriptedModel(agent_reply, context_size=window),
        toolkit=Toolkit([FunctionTool(read_log)]),
        context_config=config,
        summarizer=timed,
        middleware=[recorder],
        max_iters=steps + 5,
        readback_tools=False,
        tasks_enabled=False,
    )
    started = time.monotonic()
    await agent.reply("Read every log and report the errors.")
    wall = time.monotonic() - started
    found, prepared, discarded = waits(recorder.events)
    return {
        "waits": found,
        "prepared": prepared,
        "discarded": discarded,
        "wall": wall,
        "latencies": timed.latencies,
        "starts": timed.starts,
        "failures": timed.failures,
        "measured": timed.measured,
        "measuring_s": timed.measuring_s,
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _load() -> str:
    """The machine's 1, 5 and 15-minute load averages (a shared, noisy box)."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass(frozen=True)
class WaitFigures:
    """One row's waits per compaction, against the summary latency of the same run."""

    median: float
    p95: float
    latency: float
    """The median of the run's summary calls' latencies (0 when none ran)."""

    @property
    def median_share(self) -> float:
        return self.median / self.latency if self.latency else 0.0

    @property
    def p95_share(self) -> float:
        return self.p95 / self.latency if self.latency else 0.0


def figures(waits_s: list[float], latencies_s: list[float]) -> WaitFigures:
    """The median and p95 wait, and the median summary latency they are shares of."""
    return WaitFigures(
        median=statistics.median(waits_s) if waits_s else 0.0,
        p95=_pct(waits_s, 0.95),
        latency=statistics.median(latencies_s) if latencies_s else 0.0,
    )


async def replay_rows(
    summary_s: float, limit: int | None, background_config: BackgroundConfig
) -> list[dict[str, Any]]:
    """The SWE-bench runs replayed blocking and in the background: timing, cost, grades."""
    from contextfold.replay import ReplayTiming, RequestDump, load_trajectory, replay_runs

    from ._data import SWEBENCH_DIR
    from ._whole_run import NEEDED_KINDS, RETENTION_KINDS, load_recording
    from .retention_whole_run import Row, contextfold_views, grade_row

    paths = sorted(SWEBENCH_DIR.glob("*.traj.json"))[:limit]
    runs = [(load_trajectory(p), str(p)) for p in paths]
    timing = ReplayTiming(summary_latency_s=summary_s)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="background-replay-") as tmp:
        for background in (False, True):
            name = "background" if background else "blocking"
            config = ContextConfig(background=background_config if background else None)
            dump = RequestDump(Path(tmp) / name)
            result = await replay_runs(
                runs,
                context_size=REPLAY_WINDOW,
                config=config,
                timing=timing,
                cache="anthropic",
                dump=dump,
            )
            graded = Row("contextfold", name)
            for path in paths:
                views = contextfold_views(dump.path(path.name.removesuffix(".traj.json")))
                grade_row(graded, load_recording(path), views)
            t = result.totals
            assert t.cost is not None
            rows.append(
                {
                    "mode": name,
                    "runs": t.runs,
                    "failed": t.failed,
                    "compactions": t.compressions,
                    "waits": t.waits,
                    "wait_median": t.wait_median_s,
                    "wait_p95": t.wait_p95_s,
                    "prepared": t.prepared,
                    "applied": t.applied,
                    "discarded": t.discarded,
                    "reasons": t.discard_reasons,
                    "mean_tokens": t.mean_tokens,
                    "dollars": t.cost.dollars,
                    "written": t.cost.write,
                    "read": t.cost.read,
                    "summary_dollars": t.cost.summary_dollars,
                    "retention": {k: graded.retention.kept_rate(k) for k in RETENTION_KINDS},
                    "needed": {k: graded.coverage.rate(k) for k in NEEDED_KINDS},
                }
            )
    return rows


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def print_replay(rows: list[dict[str, Any]], summary_s: float, cost_tol: float, tol: float) -> None:
    print(
        f"Regime: the {rows[0]['runs']} recorded SWE-bench runs, window {REPLAY_WINDOW:,}, "
        f"extractive summarizer, simulated clock (recorded gaps between calls, summary "
        f"{summary_s:g} s per call), Anthropic cache model\n"
    )
    kinds = list(rows[0]["retention"]) + list(rows[0]["needed"])
    print(
        "| compaction | compactions | wait median | wait p95 | prepared | applied | discarded "
        "(why) | mean request | cost | " + " | ".join(kinds) + " |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|" + "---:|" * len(kinds))
    for r in rows:
        why = ", ".join(f"{n} {k}" for k, n in sorted(r["reasons"].items())) or "-"
        grades = [_rate(v) for v in (*r["retention"].values(), *r["needed"].values())]
        print(
            f"| {r['mode']} | {r['compactions']} | {r['wait_median'] or 0:.2f} s | "
            f"{r['wait_p95'] or 0:.2f} s | {r['prepared']} | {r['applied']} | "
            f"{r['discarded']} ({why}) | {r['mean_tokens']:,.0f} | ${r['dollars']:.2f} | "
            + " | ".join(grades)
            + " |"
        )
    blocking, background = rows
    cost = background["dollars"] / blocking["dollars"] - 1
    worst = min(
        (background[g][k] or 0) - (blocking[g][k] or 0)
        for g in ("retention", "needed")
        for k in blocking[g]
    )
    verdict = "parity" if abs(cost) <= cost_tol and worst >= -tol else "no parity"
    share = background["discarded"] / max(1, background["compactions"])
    print(
        f"\nCost {cost:+.1%} (tolerance {cost_tol:.0%}); worst retention/coverage change "
        f"{worst:+.1%} points (tolerance {tol:.0%}): **{verdict}**. Discarded prepared "
        f"summaries: {share:.0%} of compactions (target at most 10%)."
    )


async def main() -> None:
    global LINES
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step", type=float, default=0.5, help="seconds per agent call")
    parser.add_argument("--summary", type=float, default=5.0, help="seconds per summary")
    parser.add_argument(
        "--summarizer",
        choices=("scripted", "local"),
        default="scripted",
        help="who writes the summaries: a scripted model taking --summary s, or the "
        "embedded SmolLM2 model (its latency measured)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help=f"the agent's window (default {WINDOW:,}; {LOCAL_WINDOW:,} with --summarizer local)",
    )
    parser.add_argument("--lines", type=int, default=LINES, help="lines per log (~17 tokens)")
    parser.add_argument("--replay", action="store_true", help="the SWE-bench replays instead")
    parser.add_argument("--limit", type=int, default=None, help="replay at most N runs")
    parser.add_argument("--cost-tolerance", type=float, default=0.05)
    parser.add_argument("--retention-tolerance", type=float, default=0.01)
    parser.add_argument("--wait-ratio", type=float, default=BackgroundConfig().wait_ratio)
    parser.add_argument(
        "--assumed-latency",
        type=float,
        default=BackgroundConfig().assumed_latency_s,
        help="BackgroundConfig.assumed_latency_s: the latency assumed until one is measured",
    )
    parser.add_argument(
        "--start-ratio",
        type=float,
        default=BackgroundConfig().start_ratio,
        help="BackgroundConfig.start_ratio: the earliest mark a summary starts at",
    )
    parser.add_argument(
        "--only",
        choices=("blocking", "background"),
        default=None,
        help="one row alone (with --summarizer local the rows otherwise run side by side, "
        "two llama.cpp instances sharing the cores)",
    )
    args = parser.parse_args()
    LINES = args.lines
    chosen = BackgroundConfig(
        wait_ratio=args.wait_ratio,
        assumed_latency_s=args.assumed_latency,
        start_ratio=args.start_ratio,
    )
    if args.replay:
        rows = await replay_rows(args.summary, args.limit, chosen)
        print_replay(rows, args.summary, args.cost_tolerance, args.retention_tolerance)
        return
    local = args.summarizer == "local"
    window = args.window or (LOCAL_WINDOW if local else WINDOW)
    summary = (
        "the embedded SmolLM2-135M (llama.cpp, 8,192-token window, its latency measured)"
        if local
        else f"a scripted model taking {args.summary:g} s per call"
    )
    print(
        f"Regime: window {window:,} tokens, default ContextConfig (trigger 0.8, reserve 0.05), "
        f"{args.steps} steps of {args.step} s ({LINES}-line logs), our Agent with a scripted "
        f"model; summaries by {summary}; load average {_load()}\n"
    )
    print(
        "| compaction | compactions | summary latency median (calls, failed) | wait median | "
        "wait p95 | wait / summary latency (median, p95) | prepared | discarded | wall time |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    async def one(background: bool) -> dict[str, Any]:
        return await run(
            args.steps,
            args.step,
            args.summary,
            background,
            chosen,
            window=window,
            summarizer=local_summarizer if local else None,
        )

    modes = [False, True] if args.only is None else [args.only == "background"]
    if local:
        # Side by side: both rows' summaries share the machine's load at the same time.
        results = list(await asyncio.gather(*(one(b) for b in modes)))
    else:
        results = [await one(b) for b in modes]
    for background, r in zip(modes, results, strict=True):
        f = figures(r["waits"], r["latencies"])
        name = (
            f"background (start at {args.start_ratio:g}, wait at {args.wait_ratio:g}, first "
            f"latency the summarizer's measure, else assumed {args.assumed_latency:g} s)"
        )
        if not background:
            name = "blocking (at the trigger)"
        print(
            f"| {name} | {len(r['waits'])} | {f.latency:.2f} s ({len(r['latencies'])}, "
            f"{r['failures']}) | {f.median:.2f} s | {f.p95:.2f} s | "
            f"{f.median_share:.0%}, {f.p95_share:.0%} | {r['prepared']} | "
            f"{r['discarded']} | {r['wall']:.1f} s |",
            flush=True,
        )
        if local:
            print(
                f"  load average {_load()}; waits {[round(w, 1) for w in r['waits']]}, latencies "
                f"{[round(x, 1) for x in r['latencies']]}, started at "
                f"{[round(x) for x in r['starts']]} s",
                flush=True,
            )
            for measured, tokens in r["measured"]:
                speed = measured.speed
                trigger = int(0.8 * window)
                print(
                    f"  first latency measured by the summarizer ({r['measuring_s']:.1f} s, "
                    f"loading included; sample of {tokens} tokens): reads "
                    f"{speed.prompt_tokens_per_s:.0f} tokens/s, writes "
                    f"{speed.output_tokens_per_s:.1f}/s, depth cost {speed.depth_cost:.2e}; "
                    f"{measured.fixed_tokens} tokens of instructions, {measured.per_token:.2f} "
                    f"of its tokens per ours, {measured.written} written; expected at the "
                    f"trigger ({trigger} tokens): {measured.seconds(trigger):.0f} s",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main())
