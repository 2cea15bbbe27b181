"""OpenAIChatModel specifics: what goes on the wire, and what comes back."""

from __future__ import annotations

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")

from contextfold import StructuredOutputError
from contextfold import _exceptions as errors
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import OpenAIChatModel
from contextfold.model._http_errors import error_for_status, parse_retry_after, redact

from .model_fakes import FakeOpenAI
from .model_scenarios import (
    HELLO,
    PARIS_CALL,
    PERSON_SCHEMA,
    SECRET_KEY,
    WEATHER,
    Failure,
    Reply,
    Turn,
)


def make(turns: list[Turn], **kwargs: object) -> tuple[OpenAIChatModel, FakeOpenAI]:
    fake = FakeOpenAI(turns)
    options: dict[str, object] = {"api_key": SECRET_KEY, "http_client": fake.client()}
    options.update(kwargs)
    return OpenAIChatModel("gpt-4o-mini", **options), fake  # type: ignore[arg-type]


ASK = [Msg("system", "Be brief.", "system"), Msg("user", "Weather in Paris?", "user")]


async def test_request_carries_converted_messages_and_tools() -> None:
    model, fake = make([PARIS_CALL])
    await model.generate(ASK, tools=[WEATHER], tool_choice="auto")
    sent = fake.requests[0]
    assert sent["model"] == "gpt-4o-mini"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
async def test_tool_choice_maps_to_chat_completions(choice: str, wire: object) -> None:
    model, fake = make([PARIS_CALL])
    await model.generate(ASK, tools=[WEATHER], tool_choice=choice)
    assert fake.requests[0]["tool_choice"] == wire


async def test_tools_without_tool_choice_are_sent_with_auto() -> None:
    # llama-cpp-python leaves the tools out of the prompt unless tool_choice is sent.
    model, fake = make([PARIS_CALL])
    await model.generate(ASK, tools=[WEATHER])
    assert fake.requests[0]["tool_choice"] == "auto"


async def test_tool_choice_naming_an_unoffered_tool_is_rejected_before_sending() -> None:
    model, fake = make([PARIS_CALL])
    with pytest.raises(ValueError, match="get_time"):
        await model.generate(ASK, tools=[WEATHER], tool_choice="get_time")
    assert fake.requests == []


async def test_no_tools_means_no_tool_choice_sent() -> None:
    model, fake = make([HELLO])
    await model.generate(ASK, tool_choice="auto")
    assert "tools" not in fake.requests[0]
    assert "tool_choice" not in fake.requests[0]


async def test_official_api_gets_max_completion_tokens() -> None:
    model, fake = make([HELLO], max_tokens=100, temperature=0.2, seed=3)
    await model.generate(ASK)
    sent = fake.requests[0]
    assert (sent["max_completion_tokens"], sent["temperature"], sent["seed"]) == (100, 0.2, 3)
    assert "max_tokens" not in sent


async def test_compatible_server_gets_max_tokens_and_string_content() -> None:
    model, fake = make([HELLO], base_url="http://127.0.0.1:9/v1", context_size=4096, max_tokens=100)
    history = [
        *ASK,
        Msg(
            "assistant",
            [ToolCallBlock(id="c1", name="get_weather", input={"city": "P"})],
            "assistant",
        ),
        Msg("tool", [ToolResultBlock(id="c1", name="get_weather", output="Sunny")], "user"),
    ]
    await model.generate(history, tools=[WEATHER])
    sent = fake.requests[0]
    assert sent["max_tokens"] == 100
    assert sent["messages"][2]["content"] == ""
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}


async def test_stream_requests_usage() -> None:
    model, fake = make([HELLO])
    _ = [e async for e in model.stream(ASK)]
    assert fake.requests[0]["stream"] is True
    assert fake.requests[0]["stream_options"] == {"include_usage": True}


async def test_malformed_arguments_in_a_whole_response_become_input_error() -> None:
    model, _ = make([Reply(tool_calls=(("c1", "get_weather", "[1, 2]"),))])
    call = (await model.generate(ASK, tools=[WEATHER])).tool_calls[0]
    assert call.input == {}
    assert call.raw_input == "[1, 2]"
    assert call.input_error is not None
    assert "object" in call.input_error


async def test_forced_call_with_finish_reason_stop_is_tool_use() -> None:
    model, fake = make([PARIS_CALL])
    original = fake.json

    def stop_instead(reply: Reply) -> dict[str, object]:
        body = original(reply)
        body["choices"][0]["finish_reason"] = "stop"  # type: ignore[index]
        return body

    fake.json = stop_instead  # type: ignore[method-assign]
    response = await model.generate(ASK, tools=[WEATHER], tool_choice="get_weather")
    assert response.stop_reason == "tool_use"


async def test_stream_without_finish_reason_raises() -> None:
    model, fake = make([HELLO])
    fake.sse = lambda reply: iter(
        [
            b'data: {"id":"x","object":"chat.completion.chunk",'  # type: ignore[method-assign]
            b'"created":1,"model":"m","choices":[{"index":0,'
            b'"delta":{"content":"Hel"},"finish_reason":null}]}\n\n'
        ]
    )
    with pytest.raises(errors.ModelConnectionError, match="ended before"):
        _ = [e async for e in model.stream(ASK)]


def test_sdk_retries_are_off_because_the_base_class_retries() -> None:
    model, _ = make([])
    assert model._client.max_retries == 0


def test_known_models_have_their_context_window() -> None:
    assert OpenAIChatModel("gpt-4o-2024-08-06", api_key="k").context_size == 128_000
    assert OpenAIChatModel("gpt-4.1-mini", api_key="k").context_size == 1_047_576
    assert OpenAIChatModel("gpt-4", api_key="k").context_size == 8_192


def test_unknown_model_needs_context_size() -> None:
    with pytest.raises(ValueError, match="context_size"):
        OpenAIChatModel("my-local-model", base_url="http://127.0.0.1:9/v1")


def test_missing_key_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(errors.AuthenticationError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o")


def test_repr_does_not_show_the_key() -> None:
    model, _ = make([])
    assert SECRET_KEY not in repr(model)


@pytest.mark.parametrize(
    "wording",
    [
        "the request exceeds the available context size, try increasing it",
        "Requested tokens (5000) exceed context window of 4096",
        "This model's maximum context length is 4096 tokens.",
    ],
)
def test_llama_cpp_overflow_wordings_are_context_window_errors(wording: str) -> None:
    assert isinstance(error_for_status(400, wording), errors.ContextWindowExceededError)


def test_other_bad_requests_are_not_context_window_errors() -> None:
    error = error_for_status(422, "temperature must be <= 2")
    assert type(error) is errors.BadRequestError
    assert error.status_code == 422


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # in the past
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_is_parsed(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


def test_key_like_strings_are_redacted_even_when_not_our_key() -> None:
    text = redact("Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwxyz.", "other")
    assert "abcdefghijklmnopqrstuvwxyz" not in text
    assert "sk-pro" in text  # enough left to tell which key it was


LOCAL = {"base_url": "http://127.0.0.1:8080/v1"}
TIME = WEATHER.model_copy(update={"name": "get_time"})


async def test_required_with_one_tool_forces_that_tool_on_compatible_servers() -> None:
    # llama-cpp-python answers "required" with HTTP 500; naming the tool forces the same call.
    model, fake = make([PARIS_CALL], **LOCAL)
    await model.generate(ASK, tools=[WEATHER], tool_choice="required")
    assert fake.requests[0]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


async def test_required_with_several_tools_is_sent_as_is_to_compatible_servers() -> None:
    model, fake = make([PARIS_CALL], **LOCAL)
    await model.generate(ASK, tools=[WEATHER, TIME], tool_choice="required")
    assert fake.requests[0]["tool_choice"] == "required"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_server_failing_required_says_what_may_be_unsupported(stream: bool) -> None:
    model, _ = make([Failure("server_error")], max_retries=0, **LOCAL)
    with pytest.raises(errors.ServerError, match="tool_choice='required'"):
        await ask(model, stream=stream, tools=[WEATHER, TIME], tool_choice="required")


async def test_server_errors_without_required_carry_no_tool_choice_hint() -> None:
    model, _ = make([Failure("server_error")], max_retries=0, **LOCAL)
    with pytest.raises(errors.ServerError) as info:
        await model.generate(ASK, tools=[WEATHER, TIME], tool_choice="auto")
    assert "tool_choice" not in str(info.value)


async def ask(model: OpenAIChatModel, *, stream: bool, **kwargs: object) -> None:
    if stream:
        async for _ in model.stream(ASK, **kwargs):  # type: ignore[arg-type]
            pass
    else:
        await model.generate(ASK, **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
async def test_required_with_one_tool_gets_a_call_from_llama_server(llama_server: str) -> None:
    from tests.llama_server_process import LLAMA_CONTEXT

    model = OpenAIChatModel(
        "smollm2", base_url=llama_server, context_size=LLAMA_CONTEXT, max_tokens=48, seed=7
    )
    model.max_retries = 0
    response = await model.generate(ASK, tools=[WEATHER], tool_choice="required")
    assert [c.name for c in response.tool_calls] == ["get_weather"]


# -- structured output: what llama.cpp's JSON grammar lets through -------------------------

RAW_NEWLINE = '{"name": "Ada\nLovelace", "age": 36}'
"""Arguments with a raw newline inside a string: llama.cpp's JSON grammar admits it (its
string rule excludes only the quote and the backslash), strict JSON does not."""


async def test_a_forced_answer_with_a_raw_newline_in_a_string_is_accepted() -> None:
    """Seen on SmolLM2's forced summary call: the one attempt that paid a prompt-cache miss
    was thrown away as "not JSON" and the compaction fell back to truncation."""
    model, fake = make([Reply(tool_calls=(("call_1", "person", RAW_NEWLINE),))])
    out = await model.structured_output(ASK, PERSON_SCHEMA, name="person", max_attempts=1)
    assert out.value == {"name": "Ada\nLovelace", "age": 36}
    assert out.attempts == 1
    assert len(fake.requests) == 1


async def test_a_text_answer_with_a_raw_newline_in_a_string_is_accepted() -> None:
    model, _ = make([Reply(text=f"Here it is: {RAW_NEWLINE}")])
    out = await model.structured_output(
        ASK, PERSON_SCHEMA, name="person", max_attempts=1, offered=[WEATHER]
    )
    assert out.value == {"name": "Ada\nLovelace", "age": 36}


async def test_a_forced_answer_that_is_not_json_still_fails_with_the_parse_error() -> None:
    model, _ = make([Reply(tool_calls=(("call_1", "person", '{"name": "Ada", age: 36}'),))])
    with pytest.raises(StructuredOutputError, match="not a JSON object"):
        await model.structured_output(ASK, PERSON_SCHEMA, name="person", max_attempts=1)
