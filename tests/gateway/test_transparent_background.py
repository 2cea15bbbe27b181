"""Transparent mode's compaction prepared in the background, as a user runs it: the official
``anthropic`` SDK against a real gateway (uvicorn on loopback) in front of a scripted
upstream, two conversations side by side, a summarizer that takes a second per summary.
The request that passes the trigger must not wait for the summary; what is forwarded must
still follow transparent mode's rules (the summary first, every message after the snapshot
kept, tool calls with their results); a summary that no longer applies is dropped and
counted."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from contextfold.context import (
    BackgroundConfig,
    ExtractiveSummarizer,
    SummaryRequest,
    SummaryResult,
)
from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app
from contextfold.message import Usage

from .servers import ScriptedUpstream, message, serving
from .test_transparent import Conversation, summary_text

LATENCY = 1.0
"""Seconds each summary takes (the scripted summarizer's latency)."""
WORK = 0.15
"""Seconds the client works between two requests (its tools, the model's answer)."""


class SlowSummarizer:
    """The extractive summary, written in ``latency`` seconds (a model's summary call)."""

    def __init__(self, latency: float = LATENCY) -> None:
        self.latency = latency
        self.calls = 0
        self.done = 0
        self.inner = ExtractiveSummarizer()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        await asyncio.sleep(self.latency)
        result = await self.inner.summarize(request)
        self.done += 1
        # What a model's summary call would report: counted in the gateway's metrics.
        return dataclasses.replace(result, usage=Usage(input_tokens=1_000, output_tokens=100))


def policy(background: bool, **extra: Any) -> TransparentPolicy:
    fields: dict[str, Any] = {"window": 20_000, "trigger": 0.8, "keep": 0.25, "cost_guard": None}
    fields.update(extra)
    if background:
        fields["background"] = BackgroundConfig(assumed_latency_s=LATENCY)
    return TransparentPolicy(**fields)


@contextmanager
def gateway(
    upstream: ScriptedUpstream, transparent: TransparentPolicy, summarizer: Any
) -> Iterator[tuple[str, Any]]:
    for _ in range(400):
        upstream.then_json(message("ok"))
    app = create_app(
        GatewayConfig(upstream=upstream.url), transparent=transparent, summarizer=summarizer
    )
    with serving(app) as url:
        yield url, app


def bodies_of(upstream: ScriptedUpstream, session: str) -> list[dict[str, Any]]:
    return [
        r.json() for r in upstream.received if r.headers.get("x-contextfold-session") == session
    ]


def drive(url: str, session: str, turns: int, times: list[float]) -> Conversation:
    """One client: ``turns`` tool steps, each request timed."""
    conversation = Conversation(f"Find every item of {session}.", headers=headers(session))
    for _ in range(turns):
        conversation.step()
        time.sleep(WORK)
        began = time.monotonic()
        conversation.send(url)
        times.append(time.monotonic() - began)
    return conversation


def headers(session: str) -> dict[str, str]:
    return {"x-contextfold-session": session}


def side_by_side(url: str, turns: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"one": [], "two": []}
    threads = [
        threading.Thread(target=drive, args=(url, name, turns, times[name])) for name in times
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return times


def compacting(bodies: list[dict[str, Any]]) -> list[int]:
    """The turns whose forwarded request carries a new summary."""
    summaries = [summary_text(b) for b in bodies]
    return [i for i in range(1, len(bodies)) if summaries[i] != summaries[i - 1] and summaries[i]]


def metric(app: Any, name: str) -> dict[str, float]:
    text = app.state.gateway.metrics.render()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(f"contextfold_gateway_{name}"):
            label, value = line.rsplit(" ", 1)
            out[label] = float(value)
    return out


def check_rules(bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        assert body["messages"][0]["role"] == "user"
        uses = {
            b["id"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        }
        results = {
            b["tool_use_id"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        }
        assert uses == results


@pytest.mark.parametrize("background", [False, True], ids=["blocking", "background"])
def test_the_request_that_passes_the_trigger_waits_for_the_summary_only_when_blocking(
    upstream: ScriptedUpstream, background: bool
) -> None:
    summarizer = SlowSummarizer()
    with gateway(upstream, policy(background), summarizer) as (url, app):
        times = side_by_side(url, turns=40)
    # The gateway stopped: nothing is in flight, every summary started was applied or
    # dropped (and counted).
    phases = metric(app, "background_compactions_total")
    spent = metric(app, "summary_tokens_total")
    dropped = metric(app, "background_discarded_total")
    waited = metric(app, "background_wait_seconds_total")
    for session, taken in times.items():
        bodies = bodies_of(upstream, session)
        assert len(bodies) == 40
        turns = compacting(bodies)
        assert len(turns) >= 2, f"{session}: the conversation passed the trigger twice"
        check_rules(bodies)
        # Less the gateway's and the upstream's own time (the box may be loaded).
        usual = statistics.median(t for i, t in enumerate(taken) if i not in turns)
        waits = [taken[i] - usual for i in turns]
        if background:
            # No request waited for a whole summary: each was ready, or the request went
            # whole past the trigger while it was written.
            assert max(waits) < LATENCY / 2, (session, waits)
            # The forwarded request never passed the window.
            assert all(b["messages"] for b in bodies)
        else:
            assert min(waits) >= LATENCY * 0.75, (session, waits)
    if background:
        applied = phases.get('contextfold_gateway_background_compactions_total{phase="applied"}')
        assert applied is not None
        assert applied >= 4
        assert summarizer.calls >= applied
        started = phases['contextfold_gateway_background_compactions_total{phase="started"}']
        assert started == applied + sum(dropped.values())
        assert set(dropped) <= {'contextfold_gateway_background_discarded_total{reason="ended"}'}
        # The gateway's own measure: the time requests spent waiting for a summary.
        assert waited["contextfold_gateway_background_wait_seconds_total"] < LATENCY / 2
    # Every summary's tokens are reported, background ones included (dropped ones too);
    # one cancelled mid-call (the gateway stopped) reported nothing.
    when = "background" if background else "blocking"
    name = f'contextfold_gateway_summary_tokens_total{{when="{when}",kind="input"}}'
    assert spent == {
        name: 1_000 * summarizer.done,
        name.replace("input", "output"): 100 * summarizer.done,
    }


def test_a_failed_background_summary_leaves_the_state_and_the_trigger_compacts_as_before(
    upstream: ScriptedUpstream,
) -> None:
    class Failing(SlowSummarizer):
        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("the summarizer's model is down")
            return await super().summarize(request)

    summarizer = Failing(0.05)
    with gateway(upstream, policy(True), summarizer) as (url, app):
        conversation = Conversation("Find every item.", headers=headers("one"))
        for _ in range(24):
            conversation.step()
            conversation.send(url)
            time.sleep(WORK)
        discarded = metric(app, "background_discarded_total")
    assert discarded == {'contextfold_gateway_background_discarded_total{reason="failed"}': 1.0}
    bodies = bodies_of(upstream, "one")
    assert compacting(bodies), "the conversation was still compacted"
    check_rules(bodies)


def test_a_rewound_history_drops_the_prepared_summary_and_counts_it(
    upstream: ScriptedUpstream,
) -> None:
    summarizer = SlowSummarizer()
    with gateway(upstream, policy(True), summarizer) as (url, app):
        conversation = Conversation("Find every item.", headers=headers("one"))
        started: dict[str, float] = {}
        for _ in range(30):
            conversation.step()
            conversation.send(url)
            time.sleep(WORK)
            started = metric(app, "background_compactions_total")
            if started:
                break
        assert started, "a summary was started before the trigger"
        # The client rewinds: its history loses the last turns and takes another course.
        conversation.history = conversation.history[:3]
        conversation.turns = 100
        conversation.step()
        conversation.send(url)
        time.sleep(LATENCY + 0.3)
        discarded = metric(app, "background_discarded_total")
        forwarded = bodies_of(upstream, "one")[-1]
    assert discarded == {'contextfold_gateway_background_discarded_total{reason="stale"}': 1.0}
    assert summary_text(forwarded) is None
    assert len(forwarded["messages"]) == 5


def test_the_cost_guard_keeps_background_off_where_it_would_refuse_the_swap(
    upstream: ScriptedUpstream,
) -> None:
    # An 8,000-token window with the default guard (0.08): no compaction passes it below
    # the window, so a background summary would be paid for and dropped. None is started.
    summarizer = SlowSummarizer(0.05)
    transparent = policy(True, window=8_000, cost_guard=0.08)
    with gateway(upstream, transparent, summarizer) as (url, app):
        conversation = Conversation("Find every item.", headers=headers("one"))
        for _ in range(12):
            conversation.step()
            conversation.send(url)
        phases = metric(app, "background_compactions_total")
    assert phases.get('contextfold_gateway_background_compactions_total{phase="started"}') is None


def test_serve_background_gives_every_route_the_engines_background_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    import contextfold.gateway
    from contextfold.cli import app as cli

    seen: dict[str, Any] = {}
    monkeypatch.setattr(contextfold.gateway, "serve", lambda config, **kw: seen.update(kw))
    command = ["serve", "--upstream", "http://127.0.0.1:9", "--window", "8000"]
    assert CliRunner().invoke(cli, [*command, "--background"]).exit_code == 0
    assert {p.background for p in seen["transparent"].values()} == {BackgroundConfig()}
    low = CliRunner().invoke(cli, [*command, "--background", "--trigger", "0.5"])
    assert low.exit_code == 0
    assert {p.background.start_ratio for p in seen["transparent"].values()} == {0.375}
    assert CliRunner().invoke(cli, command).exit_code == 0
    assert {p.background for p in seen["transparent"].values()} == {None}


def test_chat_completions_through_the_openai_sdk_swap_without_waiting(
    upstream: ScriptedUpstream,
) -> None:
    from .test_transparent_chat import ChatConversation, completion

    # The context grows by about 15% of the window during one summary (0.5 s).
    transparent = {"/v1/chat/completions": policy(True, window=10_000)}
    summarizer = SlowSummarizer(LATENCY / 2)
    app = create_app(
        GatewayConfig(upstream=upstream.url), transparent=transparent, summarizer=summarizer
    )
    conversation = ChatConversation("Find every item.", size=500)
    times, bodies = [], []
    with serving(app) as url:
        for _ in range(40):
            conversation.step()
            time.sleep(WORK)
            began = time.monotonic()
            bodies.append(conversation.send(url, upstream))
            times.append(time.monotonic() - began)
    # The system message first, then the summary as a user message.
    summaries = [
        b["messages"][1]["content"] if b["messages"][1]["role"] == "user" else None for b in bodies
    ]
    turns = [i for i in range(1, len(bodies)) if summaries[i] != summaries[i - 1]]
    turns = [i for i in turns if summaries[i] and "continues" in summaries[i]]
    assert len(turns) >= 2
    usual = statistics.median(t for i, t in enumerate(times) if i not in turns)
    assert max(times[i] - usual for i in turns) < LATENCY / 4
    applied = metric(app, "background_compactions_total")
    assert applied['contextfold_gateway_background_compactions_total{phase="applied"}'] >= 2
    for body in bodies:
        calls = {c["id"] for m in body["messages"] for c in m.get("tool_calls") or []}
        results = {m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"}
        assert calls == results
    assert completion()["object"] == "chat.completion"
