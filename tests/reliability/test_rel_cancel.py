"""Cancellation at every await point of a reply and of a compression.

A reference run counts the event-loop turns a reply (or a compression) takes; then, for
every k up to that count, a fresh agent restored from the same saved state runs it again
and is cancelled after k turns. The model, the summarizer and the offloader all yield to
the loop several times, so cancellation lands inside model calls, between the offload and
the swap of a compression, inside tool calls and while events are emitted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextfold.agent import Agent
from contextfold.context import ContextConfig
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.model import ChatResponse, ScriptedRequest
from contextfold.tool import Toolkit
from contextfold.workspace import MemoryWorkspace

from .rel_support import (
    Added,
    assert_nothing_lost,
    assert_provider_valid,
    filler,
    make_agent,
    offloaded,
    record,
    scaled,
    scripted,
    summary_fields,
)

YIELDS = 3


class SlowWorkspace(MemoryWorkspace):
    """A memory workspace whose writes yield to the loop before and after storing."""

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        await _yield()
        ref = await super().offload_context(session_id, msgs, **kwargs)
        await _yield()
        return ref

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        await _yield()
        ref = await super().offload_tool_result(session_id, tool_result, **kwargs)
        await _yield()
        return ref


async def _yield() -> None:
    for _ in range(YIELDS):
        await asyncio.sleep(0)


def _history_state() -> str:
    """A saved session close to the compression trigger (fixed ids: runs are comparable)."""
    msgs = []
    for i in range(6):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append(Msg(role, filler(i, 70), role, id=f"h{i}"))
    agent = make_agent(scripted(), session_id="cancel")
    agent.load_state(agent.state.model_copy(update={"context": msgs}))
    return agent.state.model_dump_json()


STATE = _history_state()


def _toolkit() -> Toolkit:
    kit = Toolkit()

    @kit.register
    async def dump() -> str:
        """Print a long log."""
        await _yield()
        return "\n".join(f"log line {i}" for i in range(400))

    @kit.register
    async def echo(x: str) -> str:
        """Echo.

        Args:
            x: Text.
        """
        await _yield()
        return x

    return kit


async def _model(request: ScriptedRequest) -> Any:
    await _yield()
    if request.is_summary:
        return summary_fields("cancel")
    if request.messages[-1].tool_results or any(m.tool_results for m in request.messages[-2:]):
        return "all done"
    return ChatResponse(
        content=[
            TextBlock(text="calling tools"),
            ToolCallBlock(id="t1", name="dump", input={}),
            ToolCallBlock(id="t2", name="echo", input={"x": "hi"}),
        ],
        stop_reason="tool_use",
    )


async def _fresh() -> tuple[Agent, SlowWorkspace, Added]:
    ws = SlowWorkspace()
    await ws.initialize()
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, tool_result_limit=200)
    agent = make_agent(scripted(_model), offloader=ws, config=config, toolkit=_toolkit())
    added = Added(agent.engine)
    agent.load_state(STATE)
    return agent, ws, added


def _sig(msg: Msg) -> tuple[Any, ...]:
    blocks = tuple(
        (type(b).__name__, getattr(b, "id", None), getattr(b, "is_error", None),
         b.text if isinstance(b, TextBlock) else None)
        for b in msg.blocks()
    )  # fmt: skip
    return (msg.role, msg.name, blocks)


async def _history(agent: Agent, ws: SlowWorkspace) -> list[Msg]:
    """Offloaded messages (each once) not in the context, then the context."""
    in_context = {m.id for m in agent.context}
    seen: set[str] = set()
    out = []
    for m in await offloaded(ws, agent.session_id):
        if m.id not in seen and m.id not in in_context:
            seen.add(m.id)
            out.append(m)
    return [*out, *agent.context]


async def _cancel_after(k: int, job: Any) -> tuple[Agent, SlowWorkspace, Added, bool]:
    agent, ws, added = await _fresh()
    task = asyncio.ensure_future(job(agent))
    for _ in range(k):
        if task.done():
            break
        await asyncio.sleep(0)
    cancelled = task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        assert cancelled
    return agent, ws, added, cancelled


async def _turns(job: Any) -> tuple[int, Agent, SlowWorkspace]:
    agent, ws, _ = await _fresh()
    task = asyncio.ensure_future(job(agent))
    turns = 0
    while not task.done():
        await asyncio.sleep(0)
        turns += 1
    await task
    return turns, agent, ws


def _reply(agent: Agent) -> Any:
    return agent.reply(Msg("user", "do the work", "user", id="u-new"))


def _compress(agent: Agent) -> Any:
    return agent.compress_context(force=True)


def _points(turns: int) -> list[int]:
    """Every turn in CI; in soak mode each turn is hit several times (loop jitter from the
    tool tasks makes repeated runs land differently)."""
    return [k for _ in range(scaled(1)) for k in range(turns + 1)]


async def test_cancelled_reply_leaves_a_provider_valid_state() -> None:
    turns, _, _ = await _turns(_reply)
    for k in _points(turns):
        agent, _, _, _ = await _cancel_after(k, _reply)
        assert_provider_valid(agent)
    record("cancellation", "reply cancelled at event-loop turn k (validity)", len(_points(turns)))


async def test_cancelled_reply_leaves_a_prefix_of_the_uncancelled_history() -> None:
    turns, ref_agent, ref_ws = await _turns(_reply)
    assert ref_agent.engine.compressions == 1, "the reference reply must compress"
    reference = [_sig(m) for m in await _history(ref_agent, ref_ws)]
    old_ids = [m.id for m in (await _fresh())[0].context]
    outcomes = {"cancelled": 0, "finished": 0, "compressed": 0}
    for k in _points(turns):
        agent, ws, added, cancelled = await _cancel_after(k, _reply)
        outcomes["cancelled" if cancelled else "finished"] += 1
        outcomes["compressed"] += agent.engine.compressions
        stored = await offloaded(ws, agent.session_id)
        assert_nothing_lost(
            added.ids, [m.id for m in stored], [m.id for m in agent.context], exactly_once=False
        )
        got = [_sig(m) for m in await _history(agent, ws)]
        assert got[: len(old_ids)] == reference[: len(old_ids)], f"k={k}: old history changed"
        assert len(got) <= len(reference), f"k={k}: messages were invented"
        for i, sig in enumerate(got):
            if sig != reference[i]:
                # Only allowed difference: the last message, tool results marked interrupted.
                assert i == len(got) - 1, f"k={k}: message {i} differs"
                last = agent.context[-1]
                assert last.tool_results
                assert all(r.is_error for r in last.tool_results)
                assert all("interrupted" in r.text() for r in last.tool_results)
        # Old summary (none) or the new one, never something in between.
        assert agent.summary is None or agent.summary.text == ref_agent.summary.text  # type: ignore[union-attr]
    assert outcomes["cancelled"] > turns // 2
    assert outcomes["compressed"] > 0
    record("cancellation", "reply cancelled at event-loop turn k", len(_points(turns)))


@pytest.mark.parametrize("writer", ["summary", "fallback"])
async def test_cancelled_compression_leaves_the_old_state_or_the_new_one(writer: str) -> None:
    async def job(agent: Agent) -> Any:
        if writer == "fallback":
            agent.engine.summarizer = scripted(["not a summary"] * 3)
        return await _compress(agent)

    turns, ref_agent, _ = await _turns(job)
    assert ref_agent.summary is not None
    new = (ref_agent.summary.text, [m.id for m in ref_agent.context])
    fresh = (await _fresh())[0]
    old = (None, [m.id for m in fresh.context])
    seen = set()
    for k in _points(turns):
        agent, ws, added, _ = await _cancel_after(k, job)
        state = (agent.summary.text if agent.summary else None, [m.id for m in agent.context])
        assert state in (old, new), f"k={k}: a mix of old and new state"
        seen.add(state == new)
        assert_provider_valid(agent)
        stored = await offloaded(ws, agent.session_id)
        assert_nothing_lost(
            added.ids, [m.id for m in stored], [m.id for m in agent.context], exactly_once=False
        )
    assert seen == {True, False}
    record(
        "cancellation",
        f"compression ({writer}) cancelled at event-loop turn k",
        len(_points(turns)),
    )
