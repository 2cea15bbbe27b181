"""A compaction prepared in the background inside a framework's loop (issue 30): the
folder's engine starts the summary past the start mark, the framework's calls go on
without waiting, and the prepared summary is swapped in at the trigger."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")

from contextfold.context import (
    BackgroundCompactionEvent,
    BackgroundConfig,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ExtractiveSummarizer,
    SummaryRequest,
    SummaryResult,
)
from contextfold.integrations import HistoryFolder
from contextfold.integrations.langchain import LangChainCodec
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel
from tests.golden.harness import SYSTEM, log_text


class SlowSummarizer:
    """The extractive summary after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return await ExtractiveSummarizer().summarize(request)


@pytest.mark.serial  # a wait < 0.3 s, measured alone
async def test_a_langchain_conversation_does_not_wait_for_its_summary() -> None:
    events: list[ContextEvent] = []
    summarizer = SlowSummarizer(0.3)
    model = ScriptedModel([], context_size=6000)
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=6000,
        summarizer=summarizer,
        config=ContextConfig(
            trigger_ratio=0.8,
            reserve_ratio=0.1,
            tool_result_limit=500,
            background=BackgroundConfig(start_ratio=0.4),
        ),
        on_event=events.append,
        session_id="thread-1",
    )
    codec = LangChainCodec()
    folder: HistoryFolder[Any] = HistoryFolder(engine, codec, rewrites_history=True)
    history: list[Any] = codec.from_msg(Msg("user", "Check service 0 and report.", "user"))
    summarized = 0
    for c in range(16):
        folded = await folder.fold(history, SYSTEM)
        summarized += folded.model_input.summary is not None
        await asyncio.sleep(0.1)  # the framework's model call
        call = ToolCallBlock(id=f"t0-{c}", name="read_log", input={"service": 0, "call": c})
        result = ToolResultBlock(id=call.id, name="read_log", output=log_text(0, c))
        history = [
            *folded.history,
            *codec.from_msg(Msg("assistant", [call], "assistant")),
            *codec.from_msg(Msg("tool", [result], "user")),
        ]
    phases = [e.phase for e in events if isinstance(e, BackgroundCompactionEvent)]
    assert "applied" in phases
    assert summarized > 0
    applied = [
        e for e in events if isinstance(e, BackgroundCompactionEvent) and e.phase == "applied"
    ]
    # The summary (0.3 s) was written while the calls went on: the wait is less than it.
    assert min(e.waited_s for e in applied) < 0.3
    assert "Check service 0 and report." in str(folded.request)
