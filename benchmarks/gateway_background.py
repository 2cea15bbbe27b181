"""How long a client waits for a compaction through ``contextfold serve``'s transparent mode:
at the trigger (blocking) or prepared in the background (``TransparentPolicy(background=
BackgroundConfig())``), issue 30 point 3.

A real gateway (uvicorn on loopback) in front of a scripted Anthropic-shaped upstream that
answers at once; ``--sessions`` clients side by side, each the official ``anthropic`` SDK
running a Claude Code-like tool loop (its whole history resent every turn, about
``--tokens`` tokens of tool output per turn, ``--step`` seconds of work between requests);
the summaries written by the extractive summarizer behind a scripted ``--summary`` seconds
of latency (a model's summary call). The client's wait per compaction is the time of the
request whose forwarded body carries a new summary, less the median time of the requests
that carry none (the gateway's and the upstream's own time); as a share of the summary's
latency, median and p95 over every compaction of every session. Both rows run the same
script one after the other.

Run: ``python -m benchmarks.gateway_background [--turns 160] [--step 0.5] [--summary 5]``;
``--cost-guard 0.08`` turns on the gateway's default cost guard (off unless given): a
compaction happens only when the messages it rewrites (the summary and what it keeps) are
at most that fraction of those it replaces, so it keeps less, and a blocking one whose
first summary keeps too much writes a second; a background summary is started keeping no
more than the guard passes, and none when the guard would refuse its swap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from typing import Any

import anthropic
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contextfold.context import (
    BackgroundConfig,
    ExtractiveSummarizer,
    SummaryRequest,
    SummaryResult,
)
from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app

from ._gateway_servers import serving_in_thread

SUMMARY_PREFIX = "This conversation continues"


class SlowSummarizer:
    """The extractive summary, written in ``latency`` seconds."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.calls = 0
        self.inner = ExtractiveSummarizer()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        await asyncio.sleep(self.latency)
        return await self.inner.summarize(request)


def _upstream(seen: dict[str, list[str | None]]) -> Starlette:
    """Answers every request at once; notes, by session, the summary each one carries."""

    async def endpoint(request: Request) -> Response:
        body = json.loads(await request.body())
        first = body["messages"][0]["content"]
        text = first[0].get("text") if isinstance(first, list) and first else None
        summary = text if isinstance(text, str) and text.startswith(SUMMARY_PREFIX) else None
        seen.setdefault(request.headers.get("x-contextfold-session", ""), []).append(summary)
        return JSONResponse(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "m"),
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        )

    return Starlette(routes=[Route("/{path:path}", endpoint, methods=["POST"])])


TOOLS: list[Any] = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


def _client_loop(url: str, session: str, turns: int, step: float, size: int) -> list[float]:
    client = anthropic.Anthropic(base_url=url, api_key="sk-bench", max_retries=0)
    history: list[Any] = [{"role": "user", "content": f"Fix every item of {session}."}]
    times = []
    for i in range(turns):
        history.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}."},
                    {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"c": f"{i}"}},
                ],
            }
        )
        # About 26 tokens a line by the gateway's counter (AnthropicEstimator).
        out = f"src/{session}/mod_{i}.py:{i}: item_{i} = compute({i})\n" * max(size // 26, 1)
        history.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": out}],
            }
        )
        time.sleep(step)
        began = time.monotonic()
        client.messages.create(
            model="claude-bench",
            max_tokens=64,
            system="You are a coding agent.",
            tools=TOOLS,
            messages=history,
            extra_headers={"x-contextfold-session": session},
        )
        times.append(time.monotonic() - began)
    return times


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def run(background: bool, args: argparse.Namespace) -> dict[str, Any]:
    seen: dict[str, list[str | None]] = {}
    summarizer = SlowSummarizer(args.summary)
    latency = {} if args.assumed_latency is None else {"assumed_latency_s": args.assumed_latency}
    policy = TransparentPolicy(
        window=args.window,
        trigger=0.8,
        keep=0.25,
        cost_guard=args.cost_guard,
        background=BackgroundConfig(**latency) if background else None,
    )
    times: dict[str, list[float]] = {}
    with serving_in_thread(_upstream(seen), lifespan="on") as upstream:
        app = create_app(
            GatewayConfig(upstream=upstream), transparent=policy, summarizer=summarizer
        )
        with serving_in_thread(app, lifespan="on") as url:
            began = time.monotonic()

            def drive(name: str) -> None:
                times[name] = _client_loop(url, name, args.turns, args.step, args.tokens)

            threads = [
                threading.Thread(target=drive, args=(f"s{k}",)) for k in range(args.sessions)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.monotonic() - began
        # Read once the gateway stopped: summaries still in flight were dropped, counted.
        metrics = app.state.gateway.metrics
        phases = dict(metrics.background)
        discarded = dict(metrics.background_discarded)
        deferred = metrics.background_deferred
        waited = metrics.background_wait_sum
    waits: list[float] = []
    for name, taken in times.items():
        summaries = seen[name]
        new = [
            i
            for i in range(len(summaries))
            if summaries[i] is not None and summaries[i] != (summaries[i - 1] if i else None)
        ]
        base = statistics.median(t for i, t in enumerate(taken) if i not in set(new))
        waits.extend(max(taken[i] - base, 0.0) for i in new)
    return {
        "mode": "background" if background else "blocking",
        "compactions": len(waits),
        "wait_median_s": statistics.median(waits) if waits else None,
        "wait_p95_s": _p95(waits) if waits else None,
        "share_median": statistics.median(waits) / args.summary if waits else None,
        "share_p95": _p95(waits) / args.summary if waits else None,
        "summaries": summarizer.calls,
        "phases": phases,
        "discarded": discarded,
        "deferred": deferred,
        "waited_in_gateway_s": waited,
        "wall_s": wall,
        "waits_s": sorted(round(w, 2) for w in waits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=160, help="requests per session")
    parser.add_argument("--sessions", type=int, default=2, help="clients side by side")
    parser.add_argument("--step", type=float, default=0.5, help="seconds of work per turn")
    parser.add_argument("--summary", type=float, default=5.0, help="seconds per summary")
    parser.add_argument(
        "--tokens", type=int, default=1_000, help="tool output per turn (gateway tokens)"
    )
    parser.add_argument("--window", type=int, default=40_000, help="the policy's window")
    parser.add_argument("--only", choices=["blocking", "background"], default=None)
    parser.add_argument(
        "--cost-guard",
        type=float,
        default=None,
        help="TransparentPolicy.cost_guard (the gateway's default is 0.08; off unless given)",
    )
    parser.add_argument(
        "--assumed-latency",
        type=float,
        default=None,
        help="BackgroundConfig.assumed_latency_s (default 10 s): the latency assumed until "
        "a background summary is measured",
    )
    args = parser.parse_args()
    rows = []
    for background in (False, True):
        if args.only is not None and args.only != ("background" if background else "blocking"):
            continue
        rows.append(run(background, args))
        print(json.dumps(rows[-1]), flush=True)
    print(
        "| compaction | compactions | wait median | wait p95 | share (median, p95) "
        "| summaries | deferred | discarded | wall |"
    )
    guard = "off" if args.cost_guard is None else args.cost_guard
    print(f"(cost guard {guard}, first latency assumed {args.assumed_latency or 10:g} s)")
    for r in rows:
        if r["compactions"]:
            print(
                f"| {r['mode']} | {r['compactions']} | {r['wait_median_s']:.2f} s | "
                f"{r['wait_p95_s']:.2f} s | {r['share_median']:.0%}, {r['share_p95']:.0%} | "
                f"{r['summaries']} | {r['deferred']} | {sum(r['discarded'].values())} | "
                f"{r['wall_s']:.1f} s |"
            )


if __name__ == "__main__":
    main()
