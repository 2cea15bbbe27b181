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
import statistics
import tempfile
import time
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
    ModelSummarizer,
)
from contextfold.message import ToolCallBlock
from contextfold.middleware import AgentView, Middleware
from contextfold.model import ScriptedModel, ScriptedRequest
from contextfold.tool import FunctionTool, Toolkit

WINDOW = 16_000
REPLAY_WINDOW = 16_000
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


def read_log(n: int) -> str:
    """Read log number ``n``.

    Args:
        n: Which log.
    """
    return "\n".join(
        f"log {n} line {i}: GET /api/v{i % 3}/items status {200 if i % 17 else 500}"
        for i in range(40)
    )


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
) -> dict[str, Any]:
    async def agent_reply(request: ScriptedRequest) -> Any:
        await asyncio.sleep(step_s)
        made = sum(len(m.tool_calls) for m in request.messages)
        if made >= steps:
            return "Done: errors 500 in every log."
        return [ToolCallBlock(id=f"c{made}", name="read_log", input={"n": made})]

    async def summary_reply(request: ScriptedRequest) -> Any:
        await asyncio.sleep(summary_s)
        return FIELDS

    recorder = Recorder()
    config = ContextConfig(
        background=(background_config or BackgroundConfig()) if background else None
    )
    agent = Agent(
        name="bench",
        system_prompt="Read the logs one by one and report the errors.",
        model=ScriptedModel(agent_reply, context_size=WINDOW),
        toolkit=Toolkit([FunctionTool(read_log)]),
        context_config=config,
        summarizer=ModelSummarizer(ScriptedModel(summary_reply, context_size=WINDOW)),
        middleware=[recorder],
        max_iters=steps + 5,
        readback_tools=False,
        tasks_enabled=False,
    )
    started = time.monotonic()
    await agent.reply("Read every log and report the errors.")
    wall = time.monotonic() - started
    found, prepared, discarded = waits(recorder.events)
    return {"waits": found, "prepared": prepared, "discarded": discarded, "wall": wall}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step", type=float, default=0.5, help="seconds per agent call")
    parser.add_argument("--summary", type=float, default=5.0, help="seconds per summary")
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
    args = parser.parse_args()
    chosen = BackgroundConfig(wait_ratio=args.wait_ratio, assumed_latency_s=args.assumed_latency)
    if args.replay:
        rows = await replay_rows(args.summary, args.limit, chosen)
        print_replay(rows, args.summary, args.cost_tolerance, args.retention_tolerance)
        return
    print(
        f"Regime: window {WINDOW:,} tokens, default ContextConfig (trigger 0.8, reserve 0.05), "
        f"{args.steps} steps of {args.step} s, summary {args.summary} s per call, "
        "our Agent with a scripted model\n"
    )
    print(
        "| compaction | compactions | wait median | wait p95 | wait / summary latency "
        "(median, p95) | prepared | discarded | wall time |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for background in (False, True):
        r = await run(args.steps, args.step, args.summary, background, chosen)
        w = r["waits"]
        med, p95 = (statistics.median(w) if w else 0.0), _pct(w, 0.95)
        name = (
            f"background (wait at {args.wait_ratio:g}, first latency assumed "
            f"{args.assumed_latency:g} s)"
        )
        if not background:
            name = "blocking (at the trigger)"
        print(
            f"| {name} | {len(w)} | {med:.2f} s | {p95:.2f} s | "
            f"{med / args.summary:.0%}, {p95 / args.summary:.0%} | {r['prepared']} | "
            f"{r['discarded']} | {r['wall']:.1f} s |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
