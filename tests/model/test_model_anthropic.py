"""AnthropicChatModel specifics: request shape, thinking signatures, stream errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")
pytest.importorskip("httpx2", reason="the fake provider servers need httpx2 (dev extra)")

import httpx2

from contextfold import _exceptions as errors
from contextfold.message import Msg, ThinkingBlock, ToolResultBlock
from contextfold.model import AnthropicChatModel, ResponseCompleted, ThinkingDelta

from .model_fakes import FakeAnthropic
from .model_scenarios import HELLO, PARIS_CALL, SECRET_KEY, WEATHER, Reply, Turn

THOUGHTFUL = Reply(
    thinking=("The user wants Paris weather; call the tool.", "EqQBCkYIBRgCKkD+sig=="),
    tool_calls=(("toolu_01", "get_weather", '{"city": "Paris"}'),),
)
ASK = [Msg("system", "Be brief.", "system"), Msg("user", "Weather in Paris?", "user")]


def make(turns: list[Turn], **kwargs: object) -> tuple[AnthropicChatModel, FakeAnthropic]:
    fake = FakeAnthropic(turns)
    options: dict[str, object] = {"api_key": SECRET_KEY, "http_client": fake.client()}
    options.update(kwargs)
    return AnthropicChatModel("claude-sonnet-5", **options), fake  # type: ignore[arg-type]


async def test_request_has_system_messages_tools_and_default_max_tokens() -> None:
    model, fake = make([HELLO])
    await model.generate(ASK, tools=[WEATHER])
    sent = fake.requests[0]
    # Prompt caching: breakpoints after the system prompt and after the last message.
    ephemeral = {"type": "ephemeral"}
    assert sent["system"] == [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}]
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather in Paris?", "cache_control": ephemeral}],
        }
    ]
    assert sent["tools"][0]["input_schema"] == WEATHER.parameters
    assert sent["max_tokens"] == 8192
    sent_headers = fake.headers[0]
    assert SECRET_KEY in sent_headers.get("x-api-key", sent_headers.get("authorization", ""))


async def test_without_prompt_caching_no_breakpoint_is_sent() -> None:
    model, fake = make([HELLO])
    model.prompt_caching = False
    await model.generate(ASK, tools=[WEATHER])
    sent = fake.requests[0]
    assert sent["system"] == "Be brief."
    assert sent["messages"] == [{"role": "user", "content": "Weather in Paris?"}]


async def test_no_system_message_means_no_system_parameter() -> None:
    model, fake = make([HELLO])
    await model.generate(ASK[1:])
    assert "system" not in fake.requests[0]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("get_weather", {"type": "tool", "name": "get_weather"}),
    ],
)
async def test_tool_choice_maps_to_messages_api(choice: str, wire: dict[str, str]) -> None:
    model, fake = make([PARIS_CALL])
    await model.generate(ASK, tools=[WEATHER], tool_choice=choice)
    assert fake.requests[0]["tool_choice"] == wire


async def test_thinking_keeps_its_signature() -> None:
    model, _ = make([THOUGHTFUL])
    response = await model.generate(ASK, tools=[WEATHER])
    thinking = response.content[0]
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.signature == "EqQBCkYIBRgCKkD+sig=="
    assert response.tool_calls[0].input == {"city": "Paris"}


async def test_streamed_thinking_equals_whole_thinking_with_signature() -> None:
    model, _ = make([THOUGHTFUL, THOUGHTFUL])
    whole = await model.generate(ASK, tools=[WEATHER])
    events = [e async for e in model.stream(ASK, tools=[WEATHER])]
    assert isinstance(events[-1], ResponseCompleted)
    assert events[-1].response.content == whole.content
    streamed = "".join(e.thinking for e in events if isinstance(e, ThinkingDelta))
    assert streamed == THOUGHTFUL.thinking[0]  # type: ignore[index]


async def test_thinking_and_tool_result_are_sent_back_in_wire_format() -> None:
    model, fake = make([THOUGHTFUL, HELLO])
    first = await model.generate(ASK, tools=[WEATHER])
    call = first.tool_calls[0]
    history = [
        *ASK,
        first.to_msg("assistant"),
        Msg("tool", [ToolResultBlock(id=call.id, name=call.name, output="Sunny")], "user"),
    ]
    await model.generate(history, tools=[WEATHER])
    assistant, result = fake.requests[1]["messages"][1:]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHTFUL.thinking[0],  # type: ignore[index]
        "signature": "EqQBCkYIBRgCKkD+sig==",
    }
    assert assistant["content"][1]["type"] == "tool_use"
    assert result["content"][0]["type"] == "tool_result"
    assert result["content"][0]["tool_use_id"] == "toolu_01"


async def test_usage_counts_cache_reads_and_writes_as_input() -> None:
    model, fake = make([HELLO])
    original = fake.json

    def with_cache_write(reply: Reply) -> dict[str, object]:
        body = original(reply)
        body["usage"] = {
            "input_tokens": 10,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200,
            "output_tokens": 5,
        }
        return body

    fake.json = with_cache_write  # type: ignore[method-assign]
    usage = (await model.generate(ASK)).usage
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        1210,
        1000,
        200,
    )


async def test_overloaded_error_event_mid_stream_is_server_error() -> None:
    model, fake = make([HELLO])
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake.sse = lambda reply: iter(  # type: ignore[method-assign]
        [f"event: error\ndata: {json.dumps(error)}\n\n".encode()]
    )
    model.max_retries = 0
    with pytest.raises(errors.ServerError, match="Overloaded"):
        _ = [e async for e in model.stream(ASK)]


async def test_stream_without_message_stop_raises() -> None:
    model, fake = make([HELLO])
    original = fake.sse
    fake.sse = lambda reply: iter(list(original(reply))[:-1])  # type: ignore[method-assign]
    with pytest.raises(errors.ModelConnectionError, match="ended before"):
        _ = [e async for e in model.stream(ASK)]


async def test_529_overloaded_status_is_server_error() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    transport = httpx2.MockTransport(lambda request: httpx2.Response(529, json=body))
    model, _ = make([], http_client=httpx2.AsyncClient(transport=transport), max_retries=0)
    with pytest.raises(errors.ServerError) as info:
        await model.generate(ASK)
    assert info.value.status_code == 529


def test_sdk_retries_are_off_because_the_base_class_retries() -> None:
    model, _ = make([])
    assert model._client.max_retries == 0


def test_claude_3_haiku_gets_its_smaller_output_budget() -> None:
    assert AnthropicChatModel("claude-3-haiku-20240307", api_key="k").max_tokens == 4096
    assert AnthropicChatModel("claude-opus-5", api_key="k", max_tokens=512).max_tokens == 512


def test_missing_key_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(errors.AuthenticationError, match="ANTHROPIC_API_KEY"):
        AnthropicChatModel("claude-sonnet-5")
