"""LocalChatModel: the embedded model answers, calls tools and gives structured output."""

from __future__ import annotations

from functools import partial

import pytest

from contextfold._exceptions import ContextWindowExceededError
from contextfold.context import SummarySchema
from contextfold.message import Msg
from contextfold.model import (
    ChatModelBase,
    LocalChatModel,
    ResponseCompleted,
    StructuredOutput,
    TextDelta,
    ToolCallDelta,
)
from contextfold.model._local_completion import Completion
from contextfold.model._local_turn import call_block
from tests.sample_tools import SEARCH, WEATHER

QUESTION = [
    Msg("system", "You are a helpful assistant. Answer briefly.", "system"),
    Msg("user", "What is the capital of France?", "user"),
]


async def test_answers_a_question_with_text_and_usage(local_model: LocalChatModel) -> None:
    response = await local_model.generate(QUESTION)
    assert response.text.strip()
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.stop_reason in ("end_turn", "max_tokens")


async def test_forced_tool_produces_a_parsed_call(local_model: LocalChatModel) -> None:
    messages = [*QUESTION[:1], Msg("user", "What's the weather in Paris?", "user")]
    response = await local_model.generate(
        messages, tools=[WEATHER, SEARCH], tool_choice="get_weather"
    )
    [call] = response.tool_calls
    assert call.name == "get_weather"
    assert call.input_error is None
    assert isinstance(call.input["city"], str)
    assert response.stop_reason == "tool_use"


async def test_auto_tool_choice_returns_text_or_a_valid_call(local_model: LocalChatModel) -> None:
    messages = [*QUESTION[:1], Msg("user", "Search the docs for 'compression'.", "user")]
    response = await local_model.generate(messages, tools=[WEATHER, SEARCH], tool_choice="auto")
    if response.tool_calls:
        assert response.tool_calls[0].name in ("get_weather", "search_docs")
        assert response.tool_calls[0].input_error is None
    else:
        assert response.text


async def test_structured_output_validates_against_schema(local_model: LocalChatModel) -> None:
    schema = {
        "type": "object",
        "properties": {"fruit": {"type": "string"}, "color": {"type": "string"}},
        "required": ["fruit", "color"],
        "additionalProperties": False,
    }
    result = await local_model.structured(
        [Msg("user", "Name a fruit and its color.", "user")], schema
    )
    assert set(result) == {"fruit", "color"}
    assert all(isinstance(v, str) for v in result.values())


async def test_structured_output_through_forced_tool_call_of_base_class(
    local_model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    forced_tool_call = partial(ChatModelBase._structured_attempt, local_model)
    monkeypatch.setattr(local_model, "_structured_attempt", forced_tool_call)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    result = await local_model.structured(
        [Msg("user", "Which city is the capital of Italy?", "user")], schema
    )
    assert isinstance(result["city"], str)


async def test_a_grammar_retry_shows_the_answer_and_its_validation_error(
    local_model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    answers = iter(['{"city": 3}', '{"city": "Rome"}'])
    prompts: list[str] = []

    def complete(prompt: str, **options: object) -> Completion:
        prompts.append(prompt)
        return Completion(text=next(answers))

    monkeypatch.setattr(local_model, "_complete", complete)
    out = await local_model.structured_output(
        [Msg("user", "Which city is the capital of Italy?", "user")], schema
    )
    assert out == StructuredOutput(value={"city": "Rome"}, attempts=2)
    assert prompts[1].startswith(prompts[0].removesuffix("<|im_start|>assistant\n"))
    assert '{"city": 3}' in prompts[1]
    assert "3 is not of type 'string'" in prompts[1]


async def test_a_raw_control_character_in_a_string_is_accepted(
    local_model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grammar lets the small model write a raw newline or tab inside a JSON string;
    # the value is unambiguous, and a retry would add the answer to a prompt near the window.
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    def complete(prompt: str, **options: object) -> Completion:
        return Completion(text='{"city": "Rome\tItaly\nEurope"}')

    monkeypatch.setattr(local_model, "_complete", complete)
    out = await local_model.structured_output([Msg("user", "Where?", "user")], schema)
    assert out == StructuredOutput(value={"city": "Rome\tItaly\nEurope"}, attempts=1)


async def test_stream_yields_text_then_the_same_response(local_model: LocalChatModel) -> None:
    events = [e async for e in local_model.stream(QUESTION)]
    assert isinstance(events[-1], ResponseCompleted)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed.strip() == events[-1].response.text
    assert events[-1].response.usage is not None


async def test_prompt_larger_than_window_raises_context_window_exceeded() -> None:
    small = LocalChatModel(context_size=64, max_tokens=4)
    with pytest.raises(ContextWindowExceededError, match="context window"):
        await small.generate([Msg("user", "word " * 200, "user")])


async def test_tool_choice_naming_no_offered_tool_is_rejected(local_model: LocalChatModel) -> None:
    with pytest.raises(ValueError, match="names no offered tool"):
        await local_model.generate(QUESTION, tools=[WEATHER], tool_choice="nope")


def test_unsupported_chat_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="chat_format"):
        LocalChatModel(chat_format="llama-2")


async def test_streamed_tool_call_arrives_as_deltas(local_model: LocalChatModel) -> None:
    messages = [Msg("user", "What's the weather in Rome?", "user")]
    events = [
        e async for e in local_model.stream(messages, tools=[WEATHER], tool_choice="get_weather")
    ]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0].name == "get_weather"
    final = events[-1]
    assert isinstance(final, ResponseCompleted)
    [call] = final.response.tool_calls
    assert "".join(d.arguments for d in deltas) == call.raw_input


@pytest.mark.parametrize(
    ("text", "problem"),
    [('{"city": "Par', "not JSON"), ('["Paris"]', "JSON list, not an object")],
)
def test_malformed_arguments_become_input_error(text: str, problem: str) -> None:
    call = call_block("call_x", "get_weather", text)
    assert call.input == {}
    assert call.raw_input == text
    assert call.input_error is not None
    assert problem in call.input_error


@pytest.mark.model  # runs the embedded model
async def test_a_five_field_summary_closes_within_max_tokens() -> None:
    # Unbounded, the small model runs a field on until the answer is cut at max_tokens
    # and the cut JSON is no answer; each string's maxLength, scaled to max_tokens, makes
    # the grammar close the object in time.
    schema = SummarySchema.model_json_schema()
    for seed in (0, 1, 2):
        model = LocalChatModel(max_tokens=120, context_size=2048, seed=seed)
        conversation = [
            Msg("user", "Fix the failing test in src/parser.py; keep the public API.", "user"),
            Msg("assistant", "pytest: test_parse_dates fails with a ValueError.", "assistant"),
        ]
        out = await model.structured_output(conversation, schema, max_attempts=1)
        assert set(out.value) == set(schema["properties"])
        assert all(isinstance(v, str) for v in out.value.values())
