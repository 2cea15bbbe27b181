"""Every content block LangChain v1 can put in its messages passes through the middleware
(issue 26: a prompt with a standard ``image`` or ``file`` block raised, and a tool
message's image was neither counted nor kept when the message was cut): a real
``create_agent`` run with a scripted chat model, several turns on one thread and past
compactions."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from contextfold.context import (
    CompressionEvent,
    ContextEvent,
    ImageRemovalEvent,
    ModelSummarizer,
    TruncationEvent,
)
from contextfold.integrations.langchain import ContextfoldMiddleware, LangChainCodec
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace

from .items import (
    CALLS_PER_TURN,
    CONFIG,
    CONTEXT_SIZE,
    FIELDS,
    MAX_IMAGES,
    TURNS,
    log_text,
    png_b64,
)


def prompt(t: int) -> HumanMessage:
    """A prompt with every kind of standard block, and the OpenAI forms."""
    return HumanMessage(
        content=[
            {"type": "text", "text": f"Check service {t}: read its logs, take a screenshot."},
            {"type": "image", "base64": png_b64(t), "mime_type": "image/png"},
            {"type": "image", "url": f"https://example.com/screen{t}.png"},
            {"type": "image_url", "image_url": {"url": f"https://example.com/chart{t}.png"}},
            {"type": "file", "file_id": f"file-{t}"},
            {
                "type": "file",
                "url": f"https://example.com/spec{t}.pdf",
                "mime_type": "application/pdf",
            },
            {"type": "audio", "base64": "UklGRiQAAABXQVZF", "mime_type": "audio/wav"},
            {"type": "video", "url": f"https://example.com/demo{t}.mp4", "mime_type": "video/mp4"},
            {"type": "text-plain", "text": f"notes {t}", "mime_type": "text/plain"},
        ]
    )


def images(messages: list[BaseMessage]) -> int:
    count = 0
    for m in messages:
        if isinstance(m.content, list):
            count += sum(
                1
                for b in m.content
                if isinstance(b, dict) and b.get("type") in ("image", "image_url")
            )
    return count


class Scripted(BaseChatModel):
    """Per turn: ``CALLS_PER_TURN`` log reads, a screenshot, then an answer with reasoning
    and a server-side web search. Records every request."""

    received: list[list[BaseMessage]] = Field(default_factory=list)
    made: list[AIMessage] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        turn = max(
            t for t in range(TURNS) if any(f"Check service {t}" in str(m.content) for m in messages)
        )
        n = sum(
            1
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
            if str(c["id"]).startswith(f"t{turn}-")
        )
        reasoning = {"type": "reasoning", "reasoning": f"Step {n} of turn {turn}."}
        if n < CALLS_PER_TURN:
            call = {"name": "read_log", "args": {"turn": turn, "call": n}, "id": f"t{turn}-{n}"}
            answer = AIMessage(content=[reasoning], tool_calls=[call])
        elif n == CALLS_PER_TURN:
            call = {"name": "screenshot", "args": {"turn": turn}, "id": f"t{turn}-{n}"}
            answer = AIMessage(content="", tool_calls=[call])
        else:
            answer = AIMessage(
                content=[
                    reasoning,
                    {
                        "type": "server_tool_call",
                        "name": "web_search",
                        "args": {"q": "status"},
                        "id": f"ws{turn}",
                    },
                    {
                        "type": "server_tool_result",
                        "tool_call_id": f"ws{turn}",
                        "status": "success",
                        "output": "up",
                    },
                    {"type": "text", "text": f"Service {turn} is fine."},
                ]
            )
        self.made.append(answer)
        return ChatResult(generations=[ChatGeneration(message=answer)])


@tool
def read_log(turn: int, call: int) -> str:
    """Read one log."""
    return log_text(turn, call)


@tool(response_format="content")
def screenshot(turn: int) -> list[dict[str, Any]]:
    """Take a screenshot."""
    return [
        {"type": "text", "text": log_text(turn, 9)},
        {"type": "image", "base64": png_b64(100 + turn), "mime_type": "image/png"},
    ]


async def test_every_content_block_passes_through_a_run_past_compactions() -> None:
    events: list[ContextEvent] = []
    summaries = ScriptedModel(lambda request: FIELDS, context_size=32_000)
    middleware = ContextfoldMiddleware(
        counter=summaries.token_counter,
        context_size=CONTEXT_SIZE,
        summarizer=ModelSummarizer(summaries),
        offloader=MemoryWorkspace(),
        config=CONFIG,
        on_event=events.append,
    )
    model = Scripted()
    agent = create_agent(
        model, tools=[read_log, screenshot], middleware=[middleware], checkpointer=InMemorySaver()
    )
    prompts = [prompt(t) for t in range(TURNS)]
    for t in range(TURNS):
        await agent.ainvoke(
            {"messages": [prompts[t]]}, config={"configurable": {"thread_id": "ops"}}
        )

    assert len(model.received) == TURNS * (CALLS_PER_TURN + 2)
    assert any(isinstance(e, CompressionEvent) for e in events)
    assert any(isinstance(e, TruncationEvent) for e in events)
    assert any(isinstance(e, ImageRemovalEvent) for e in events)
    shots = [
        m.content
        for sent in model.received
        for m in sent
        if isinstance(m, ToolMessage) and m.name == "screenshot"
    ]
    # The cut screenshot keeps its image (it was text only).
    assert any(
        isinstance(c, list)
        and "<<<TRUNCATED>>>" in json.dumps(c)
        and images([ToolMessage(c, tool_call_id="x")])
        for c in shots
    )
    kept: set[str] = set()
    originals = [*prompts, *model.made]
    for sent in model.received:
        calls = {c["id"] for m in sent if isinstance(m, AIMessage) for c in m.tool_calls}
        answers = {m.tool_call_id for m in sent if isinstance(m, ToolMessage)}
        assert calls == answers
        assert images(sent) <= MAX_IMAGES
        for m in sent:
            for original in originals:
                if m.content == original.content and isinstance(m.content, list):
                    kept.update(b["type"] for b in m.content)
    assert kept >= {
        "text",
        "image",
        "image_url",
        "file",
        "audio",
        "video",
        "text-plain",
        "reasoning",
        "server_tool_call",
        "server_tool_result",
    }


def test_each_block_converts_back_as_it_came() -> None:
    # What a resumed thread (only the engine's messages) or a changed message sends back.
    # (An OpenAI ``image_url`` block comes back in the standard form, ``image``.)
    standard = [b for b in prompt(0).content if b["type"] != "image_url"]  # type: ignore[index]
    codec = LangChainCodec()
    for message in [
        HumanMessage(content=standard),
        AIMessage(
            content=[
                {"type": "reasoning", "reasoning": "Think."},
                {"type": "server_tool_call", "name": "web_search", "args": {"q": "x"}, "id": "ws"},
                {
                    "type": "server_tool_result",
                    "tool_call_id": "ws",
                    "status": "success",
                    "output": "up",
                },
                {"type": "text", "text": "Done."},
            ]
        ),
    ]:
        ((msg, _),) = codec.to_msgs([message])
        (back,) = codec.from_msg(msg)
        assert type(back) is type(message)
        assert back.content == message.content
