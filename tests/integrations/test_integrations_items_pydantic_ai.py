"""Every part Pydantic AI can put in its history passes through ContextfoldHistory
(issue 26: an image in a user prompt raised ``cannot fold a user prompt with images or
files yet``, and a tool return's image was dropped when the return was cut): a real
``Agent`` run with a ``FunctionModel``, over several turns and past compactions."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CapabilityLoadDeltaPart,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    InstructionBaselinePart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryPromptPart,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    ToolSearchReturnPart,
    UploadedFile,
    UserPromptPart,
    VideoUrl,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from contextfold.context import (
    CompressionEvent,
    ContextEvent,
    ImageRemovalEvent,
    ModelSummarizer,
    TruncationEvent,
)
from contextfold.integrations.pydantic_ai import ContextfoldHistory, PydanticAICodec
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
    png,
)


def prompt(t: int) -> list[Any]:
    """A user prompt with every kind of user content."""
    return [
        f"Check service {t}: read its logs, take a screenshot.",
        TextContent(content=f"Ticket {t}", metadata={"source": "tracker"}),
        BinaryContent(data=png(64, 48, t), media_type="image/png"),
        ImageUrl(url=f"https://example.com/screen{t}.png"),
        DocumentUrl(url=f"https://example.com/spec{t}.pdf"),
        AudioUrl(url=f"https://example.com/call{t}.mp3"),
        VideoUrl(url=f"https://example.com/demo{t}.mp4"),
        UploadedFile(file_id=f"file-{t}", provider_name="openai", media_type="application/pdf"),
    ]


def images(messages: list[ModelMessage]) -> int:
    """Images the model received: in prompts, tool returns and generated files."""
    count = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            items = content if isinstance(content, list) else [content]
            for item in items:
                if isinstance(item, ImageUrl) or (
                    isinstance(item, BinaryContent) and item.is_image
                ):
                    count += 1
    return count


def test_every_part_type_passes_through_a_run_past_compactions() -> None:
    events: list[ContextEvent] = []
    summaries = ScriptedModel(lambda request: FIELDS, context_size=32_000)
    history = ContextfoldHistory(
        counter=summaries.token_counter,
        context_size=CONTEXT_SIZE,
        summarizer=ModelSummarizer(summaries),
        offloader=MemoryWorkspace(),
        config=CONFIG,
        on_event=events.append,
    )
    received: list[list[ModelMessage]] = []
    made: list[Any] = []  # every part the model made, and every prompt item

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(list(messages))
        turn = max(t for t in range(TURNS) if any(f"Check service {t}" in str(m) for m in messages))
        calls = [
            p
            for m in messages
            for p in m.parts
            if isinstance(p, ToolCallPart) and p.tool_call_id.startswith(f"t{turn}-")
        ]
        n = len(calls)
        if n < CALLS_PER_TURN:
            parts: list[ModelResponsePart] = [
                ThinkingPart(content=f"Reading log {n}.", signature="sig"),
                ToolCallPart("read_log", {"turn": turn, "call": n}, f"t{turn}-{n}"),
            ]
        elif n == CALLS_PER_TURN:
            parts = [ToolCallPart("screenshot", {"turn": turn}, f"t{turn}-{n}")]
        elif n == CALLS_PER_TURN + 1:
            parts = [ToolCallPart("flaky", {}, f"t{turn}-{n}")]  # raises ModelRetry once
        else:
            parts = [
                NativeToolCallPart(
                    "web_search", {"query": "status"}, f"ws{turn}", provider_name="openai"
                ),
                NativeToolReturnPart(
                    "web_search", {"results": ["ok"]}, f"ws{turn}", provider_name="openai"
                ),
                FilePart(
                    content=BinaryContent(data=png(32, 32, 200 + turn), media_type="image/png")
                ),
                CompactionPart(content=f"compacted {turn}", provider_name="openai"),
                TextPart(f"Service {turn} is fine."),
            ]
        made.extend(parts)
        return ModelResponse(parts=parts)

    retried: set[int] = set()

    def read_log(turn: int, call: int) -> str:
        """Read one log.

        Args:
            turn: The turn.
            call: The log's number.
        """
        return log_text(turn, call)

    def screenshot(turn: int) -> list[Any]:
        """Take a screenshot.

        Args:
            turn: The turn.
        """
        return [
            log_text(turn, 9),
            BinaryContent(data=png(80, 60, 100 + turn), media_type="image/png"),
        ]

    def flaky() -> str:
        """A tool that fails once per turn."""
        if len(retried) < len(received):
            retried.add(len(received))
            if len(retried) % 2:
                raise ModelRetry("try again")
        return "fine"

    agent = Agent(
        FunctionModel(respond),
        instructions="You run ops.",
        tools=[read_log, screenshot, flaky],
        capabilities=[history],
    )
    messages: list[ModelMessage] = []
    for t in range(TURNS):
        user = prompt(t)
        made.extend(user)
        result = agent.run_sync(user, message_history=messages, conversation_id="ops")
        messages = result.all_messages()

    assert any(isinstance(e, CompressionEvent) for e in events)
    assert any(isinstance(e, TruncationEvent) for e in events)
    assert any(isinstance(e, ImageRemovalEvent) for e in events)
    # The cut screenshot return keeps its image (it was sent as text only).
    shots = [
        p.content
        for sent in received
        for m in sent
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == "screenshot"
    ]
    assert any(
        isinstance(c, list) and "<<<TRUNCATED>>>" in c[0] and isinstance(c[1], BinaryContent)
        for c in shots
    )
    kept: set[str] = set()
    for sent in received:
        calls = {p.tool_call_id for m in sent for p in m.parts if isinstance(p, ToolCallPart)}
        answers = {
            p.tool_call_id
            for m in sent
            for p in m.parts
            if isinstance(p, (ToolReturnPart, RetryPromptPart)) and p.tool_name
        }
        assert calls == answers
        assert images(sent) <= MAX_IMAGES
        for m in sent:
            for p in m.parts:
                for item in [
                    p,
                    *(p.content if isinstance(getattr(p, "content", None), list) else []),
                ]:
                    if any(item is x for x in made):
                        kept.add(type(item).__name__)
    assert kept >= {
        "TextContent",
        "BinaryContent",
        "ImageUrl",
        "DocumentUrl",
        "AudioUrl",
        "VideoUrl",
        "UploadedFile",
        "ThinkingPart",
        "NativeToolCallPart",
        "NativeToolReturnPart",
        "FilePart",
        "CompactionPart",
        "TextPart",
    }


REQUEST_PARTS: list[ModelRequestPart] = [
    SystemPromptPart("Be brief."),
    ToolSearchReturnPart(content={"discovered_tools": [], "message": "none"}, tool_call_id="ts1"),
    SpeechPart(speaker="user", transcript="Is it up?"),
    ToolAvailabilityDeltaPart(tools_added=["deploy"]),
    CapabilityLoadDeltaPart(loaded=["ops"]),
    InstructionBaselinePart(instructions=[]),
    CompactionPart("earlier turns"),
]
RESPONSE_PARTS: list[ModelResponsePart] = [
    NativeToolCallPart("web_search", {"query": "x"}, "ws1", provider_name="openai"),
    NativeToolReturnPart("web_search", {"results": []}, "ws1", provider_name="openai"),
    CompactionPart("earlier turns", id="cp2", provider_name="anthropic"),
    SpeechPart(speaker="assistant", transcript="It is up."),
    FilePart(content=BinaryContent(data=png(8, 8), media_type="image/png"), id="f1"),
    ThinkingPart("Let me think.", signature="sig"),
]


@pytest.mark.parametrize("part", REQUEST_PARTS, ids=lambda p: p.part_kind)
def test_each_request_part_converts_back_as_it_came(part: ModelRequestPart) -> None:
    # What a resumed folder, or a changed message, sends back.
    codec = PydanticAICodec()
    ((msg, _),) = codec.to_msgs([ModelRequest(parts=[part, UserPromptPart("Go on.")])])
    if isinstance(part, ToolReturnPart):  # a framework tool's return (tool search, ...)
        assert [r.id for r in msg.tool_results] == [part.tool_call_id]
    else:
        assert part.part_kind in msg.text  # named in what a summary reads
    (back,) = codec.from_msg(msg)
    assert back.parts[0] == part


@pytest.mark.parametrize("part", RESPONSE_PARTS, ids=lambda p: p.part_kind)
def test_each_response_part_converts_back_as_it_came(part: ModelResponsePart) -> None:
    codec = PydanticAICodec()
    ((msg, _),) = codec.to_msgs([ModelResponse(parts=[part, TextPart("Done.")])])
    (back,) = codec.from_msg(msg)
    assert back.parts == [part, TextPart("Done.")]


def test_a_prompt_with_every_kind_of_content_is_counted_and_converts_back() -> None:
    codec = PydanticAICodec()
    content = prompt(0)
    ((msg, _),) = codec.to_msgs([ModelRequest(parts=[UserPromptPart(content=content)])])
    assert [b.type for b in msg.blocks()] == ["text"] * 2 + ["data"] * 5 + ["text"]
    assert [b.kind for b in msg.iter_data()] == ["image", "image", "file", "audio", "video"]
    (back,) = codec.from_msg(msg)
    (part,) = back.parts
    assert isinstance(part, UserPromptPart)
    assert [type(c).__name__ for c in part.content] == [
        "str",
        "str",
        "BinaryContent",
        "ImageUrl",
        "DocumentUrl",
        "AudioUrl",
        "VideoUrl",
        "UploadedFile",
    ]
    assert part.content[2] == content[2]
    assert [getattr(c, "url", None) for c in part.content[3:7]] == [c.url for c in content[3:7]]
    assert part.content[7] == content[7]
