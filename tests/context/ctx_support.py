"""Shared helpers for the context engine tests: builders and a recording offloader."""

from __future__ import annotations

import base64
import itertools
from typing import Any

from contextfold.context import ContextConfig, ContextEngine, ContextEvent, ModelSummarizer
from contextfold.message import (
    Base64Source,
    DataBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultContent,
)
from contextfold.model import ScriptedModel, ScriptedReply

SUMMARY: dict[str, str] = {
    "task_overview": "Fix the failing parser.",
    "current_state": "Read src/parser.py.",
    "important_discoveries": "The bug is in tokenize().",
    "next_steps": "Patch tokenize().",
    "context_to_preserve": "User wants no new dependencies.",
}

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode()

_ids = itertools.count(1)


def summary(**overrides: str) -> dict[str, str]:
    """The scripted summary fields, with overrides."""
    return {**SUMMARY, **overrides}


class RecordingOffloader:
    """Keeps everything offloaded in memory; refs look like workspace paths."""

    def __init__(self) -> None:
        self.contexts: list[list[Msg]] = []
        self.results: list[ToolResultBlock] = []
        self.data: list[DataBlock] = []

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        self.contexts.append(list(msgs))
        return f"/ws/sessions/{session_id}/context.jsonl#{len(self.contexts)}"

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        self.results.append(tool_result)
        return f"/ws/sessions/{session_id}/tool_result-{tool_result.id}.txt"

    async def offload_data(self, session_id: str, data: DataBlock, **kwargs: Any) -> str:
        self.data.append(data)
        return f"/ws/data/{len(self.data)}.png"

    def offloaded_ids(self) -> set[str]:
        """Ids of every message offloaded with ``offload_context``."""
        return {m.id for batch in self.contexts for m in batch}


class ContextOnlyOffloader:
    """An offloader without ``offload_data`` (images cannot be persisted)."""

    def __init__(self) -> None:
        self.inner = RecordingOffloader()

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        return await self.inner.offload_context(session_id, msgs)

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        return await self.inner.offload_tool_result(session_id, tool_result)


def make_engine(
    script: list[ScriptedReply] | None = None,
    *,
    context_size: int = 4000,
    offloader: Any = None,
    events: list[ContextEvent] | None = None,
    **config: Any,
) -> tuple[ContextEngine, ScriptedModel]:
    """An engine over a ScriptedModel that doubles as the summarizer."""
    model = ScriptedModel(script or [], context_size=context_size)
    engine = ContextEngine(
        config=ContextConfig(**config),
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(model),
        session_id="s1",
        offloader=offloader,
        on_event=events.append if events is not None else None,
    )
    return engine, model


def words(n: int, word: str = "alpha") -> str:
    """About ``n`` tokens of text."""
    return " ".join(f"{word}{i % 10}" for i in range(n // 2))


def user(text: str) -> Msg:
    return Msg("user", text, "user")


def call(*names: str, text: str = "") -> Msg:
    """An assistant message with one tool call per name (parallel calls)."""
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    blocks += [ToolCallBlock(id=f"call_{next(_ids)}", name=n, input={"arg": n}) for n in names]
    return Msg("assistant", blocks, "assistant")


def results(assistant: Msg, *outputs: str | list[ToolResultContent]) -> Msg:
    """The results message answering every call of ``assistant``, in order."""
    calls = assistant.tool_calls
    blocks = [
        ToolResultBlock(id=c.id, name=c.name, output=out)
        for c, out in zip(calls, outputs, strict=True)
    ]
    return Msg("tool", list(blocks), "user")


def image() -> DataBlock:
    return DataBlock(source=Base64Source(media_type="image/png", data=PNG))


def image_msg(n: int = 1) -> Msg:
    return Msg("user", [TextBlock(text="look"), *[image() for _ in range(n)]], "user")


async def fill(engine: ContextEngine, turns: int, tokens: int = 200) -> None:
    """``turns`` tool exchanges with results of about ``tokens`` tokens."""
    for i in range(turns):
        asst = call("bash", text=f"step {i}")
        engine.append(asst)
        await engine.add_tool_results(results(asst, words(tokens, f"out{i}_")))
