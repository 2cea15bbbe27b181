"""The agent loop and the real context engine together, at the seams between them:
the CompressContext tool, recovery from a provider overflow, and the usage hint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextfold._exceptions import ContextWindowExceededError
from contextfold.agent import Agent, check_requests_valid
from contextfold.context import CompressionEvent, ContextConfig
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace

from .integ_support import (
    EventLog,
    dump,
    is_summary,
    is_usage_hint,
    open_workspace,
    summarizer,
)


@pytest.fixture
async def workspace(tmp_path: Path) -> AsyncIterator[LocalWorkspace]:
    async for ws in open_workspace("local", tmp_path):
        yield ws


def fetch_toolkit() -> Toolkit:
    toolkit = Toolkit()
    toolkit.register(lambda: "data " * 300, name="fetch")
    return toolkit


def make_agent(model: ScriptedModel, **kwargs: object) -> Agent:
    kwargs.setdefault("tasks_enabled", False)
    return Agent(name="worker", system_prompt="Fetch data.", model=model, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ CompressContext tool


async def test_compress_tool_with_failing_summarizer_returns_error_and_keeps_context() -> None:
    model = ScriptedModel(
        [
            tool_reply(("fetch", {})),
            tool_reply(("fetch", {})),
            tool_reply(("fetch", {})),
            tool_reply(("CompressContext", {"instructions": "keep the data"})),
            "carrying on",
        ],
        context_size=3000,
    )
    failing = ScriptedModel(lambda request: RuntimeError("summarizer is down"))
    log = EventLog()
    agent = make_agent(
        model,
        toolkit=fetch_toolkit(),
        summarizer=failing,
        middleware=[log],
        context_config=ContextConfig(
            trigger_ratio=0.9,
            context_buffer_ratio=0.6,
            reserve_ratio=0.05,
            compression_tool_enabled=True,
            summary_attempts=2,
        ),
    )

    reply = await agent.reply("go")

    assert reply.text == "carrying on"
    assert len(failing.requests) == 2  # the real summary path ran, with its retries
    # The context when the agent asked to compress, and after; usage hints are not stored.
    before = [m for m in model.requests[3].messages[1:] if not is_usage_hint(m)]
    after = [m for m in model.requests[4].messages[1:] if not is_usage_hint(m)]
    result = after[-1].tool_results[0]
    assert result.name == "CompressContext"
    assert result.is_error
    assert "Compression failed" in result.text()
    assert "the context is unchanged" in result.text()
    # Unchanged: the same messages, plus only the call and its error result; no summary,
    # and no fallback to truncation (which the tool never uses).
    assert [m.id for m in after[:-2]] == [m.id for m in before]
    assert after[-2].tool_calls[0].name == "CompressContext"
    assert agent.summary is None
    assert agent.engine.compressions == 0
    assert log.of(CompressionEvent) == []
    check_requests_valid(model.requests)


# ------------------------------------------------------------------ provider overflow


async def chat(agent: Agent, turns: int) -> None:
    for i in range(turns):
        await agent.reply(f"question {i}: " + "context " * 200)


async def test_overflow_from_the_provider_compresses_once_and_retries(
    workspace: LocalWorkspace,
) -> None:
    model = ScriptedModel([f"answer {i}" for i in range(4)])
    summary_model = summarizer()
    log = EventLog()
    agent = make_agent(model, summarizer=summary_model, offloader=workspace, middleware=[log])
    await chat(agent, 4)
    model.add(ContextWindowExceededError("prompt is too long", status_code=400), "fits now")

    reply = await agent.reply("one more question")

    assert reply.text == "fits now"
    (event,) = log.of(CompressionEvent)
    assert (event.trigger, event.method) == ("overflow", "summary")
    assert len(summary_model.requests) == 1
    failed, retried = model.requests[-2], model.requests[-1]
    assert not any(is_summary(m) for m in failed.messages)
    assert is_summary(retried.messages[1])
    assert len(retried.messages) < len(failed.messages)
    assert retried.messages[-1].text == "one more question"
    check_requests_valid(model.requests)


async def test_second_overflow_raises_a_clear_error_and_loses_nothing(
    workspace: LocalWorkspace,
) -> None:
    model = ScriptedModel([f"answer {i}" for i in range(4)])
    agent = make_agent(model, summarizer=summarizer(), offloader=workspace)
    await chat(agent, 4)
    everything = [m.id for m in agent.context]
    model.add(
        ContextWindowExceededError("prompt is too long", status_code=400),
        ContextWindowExceededError("prompt is still too long", status_code=400),
        "never sent",
    )

    with pytest.raises(ContextWindowExceededError) as info:
        await agent.reply("one more question")

    message = str(info.value)
    assert "after one forced compression" in message
    assert "prompt is still too long" in message
    assert info.value.status_code == 400
    assert model.remaining == 1  # one retry only
    # Nothing lost: every message is in the offloaded history or still in the context,
    # the new question included; no answer was invented.
    offloaded = await workspace.load_context(agent.session_id)
    kept = agent.context
    assert [m.id for m in offloaded] + [m.id for m in kept[:-1]] == everything
    assert kept[-1].text == "one more question"
    assert agent.summary is not None


# ------------------------------------------------------------------ usage hint


async def test_usage_hint_is_sent_past_the_hint_ratio_and_never_stored() -> None:
    model = ScriptedModel([tool_reply(("fetch", {})) for _ in range(5)] + ["done"])
    config = ContextConfig(trigger_ratio=0.9, context_buffer_ratio=0.6, reserve_ratio=0.05)
    model.context_size = 4000
    agent = make_agent(model, toolkit=fetch_toolkit(), context_config=config)

    assert (await agent.reply("go")).text == "done"

    counter = model.token_counter
    threshold = config.hint_ratio * model.context_size
    hinted = []
    for request in model.requests:
        hints = [i for i, m in enumerate(request.messages) if is_usage_hint(m)]
        stored = [m for m in request.messages if not is_usage_hint(m)]
        over = counter.count_request(stored, request.tools) > threshold
        assert hints == ([len(request.messages) - 1] if over else [])
        hinted.append(over)
    assert hinted[0] is False
    assert hinted[-1] is True
    assert agent.summary is None  # the hint alone, no compression
    assert not any(is_usage_hint(m) for m in agent.context)
    assert "Context usage:" not in agent.state.model_dump_json()
    assert all("Context usage:" not in dump(m) for m in agent.context)
