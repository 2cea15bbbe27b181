"""Behaviour of the OpenAI Chat Completions converter."""

import json
from typing import Any

import pytest

from contextfold._exceptions import MessageFormatError
from contextfold.message import (
    Base64Source,
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    URLSource,
    from_openai_message,
    from_openai_messages,
    to_openai_messages,
    to_openai_tool_choice,
    to_openai_tools,
)

PNG = "iVBORw0KGgo="


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _round_trip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    msgs = from_openai_messages(messages)
    return to_openai_messages([Msg.model_validate_json(m.model_dump_json()) for m in msgs])


def test_tool_message_becomes_user_msg_with_one_result_named_after_its_call() -> None:
    msgs = from_openai_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("c1", "add", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
        ]
    )
    assert msgs[1].role == "user"
    assert msgs[1].content == [ToolResultBlock(id="c1", name="add", output="3")]


def test_assistant_tool_call_keeps_arguments_raw_and_parsed() -> None:
    msg = from_openai_messages(
        [{"role": "assistant", "content": None, "tool_calls": [_call("c1", "f", '{"a":1}')]}]
    )[0]
    assert msg.tool_calls == [ToolCallBlock(id="c1", name="f", input={"a": 1}, raw_input='{"a":1}')]


def test_parallel_calls_round_trip_in_order() -> None:
    messages = [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call("a", "weather", '{"city": "Paris"}'),
                _call("b", "weather", '{"city":"Rome"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "assistant", "content": "Paris sunny, Rome rain."},
    ]
    assert _round_trip(messages) == messages


def test_edited_input_is_sent_as_json_not_the_stale_raw_text() -> None:
    call = ToolCallBlock(id="c", name="f", input={"a": 2}, raw_input='{"a": 1}')
    wire = to_openai_messages([Msg("bot", [call], "assistant")])
    assert json.loads(wire[0]["tool_calls"][0]["function"]["arguments"]) == {"a": 2}


def test_raw_text_is_sent_verbatim_when_it_still_matches_input() -> None:
    call = ToolCallBlock(id="c", name="f", input={"a": 1}, raw_input='{ "a" :  1 }')
    wire = to_openai_messages([Msg("bot", [call], "assistant")])
    assert wire[0]["tool_calls"][0]["function"]["arguments"] == '{ "a" :  1 }'


def test_invalid_arguments_in_a_history_raise_naming_message_and_field() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c", "f", "{oops")]},
    ]
    with pytest.raises(
        MessageFormatError,
        match=r"message 1: tool_calls\[0\]\.function\.arguments is not valid JSON",
    ):
        from_openai_messages(messages)


def test_non_object_arguments_in_a_history_raise() -> None:
    messages = [{"role": "assistant", "content": None, "tool_calls": [_call("c", "f", "[1, 2]")]}]
    with pytest.raises(MessageFormatError, match="must be a JSON object, got an array"):
        from_openai_messages(messages)


def test_invalid_arguments_in_a_model_answer_become_an_input_error() -> None:
    msg = from_openai_message(
        {"role": "assistant", "content": None, "tool_calls": [_call("c", "f", '{"a": ')]}
    )
    call = msg.tool_calls[0]
    assert (call.input, call.raw_input) == ({}, '{"a": ')
    assert call.input_error is not None
    assert "not valid JSON" in call.input_error


def test_call_with_input_error_is_sent_back_with_the_model_text() -> None:
    msg = from_openai_message(
        {"role": "assistant", "content": None, "tool_calls": [_call("c", "f", "not json")]}
    )
    assert to_openai_messages([msg])[0]["tool_calls"][0]["function"]["arguments"] == "not json"


def test_empty_arguments_mean_no_arguments() -> None:
    msg = from_openai_messages(
        [{"role": "assistant", "content": None, "tool_calls": [_call("c", "now", "")]}]
    )[0]
    assert msg.tool_calls[0].input == {}
    assert to_openai_messages([msg])[0]["tool_calls"][0]["function"]["arguments"] == ""


def test_missing_tool_call_id_raises_naming_the_field() -> None:
    with pytest.raises(
        MessageFormatError, match="message 0: tool_call_id must be a string, got null"
    ):
        from_openai_messages([{"role": "tool", "content": "x"}])


def test_unknown_role_raises() -> None:
    with pytest.raises(MessageFormatError, match="message 0: role must be one of"):
        from_openai_messages([{"role": "robot", "content": "x"}])


def test_content_shapes_round_trip() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "alice"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c", "f", "{}")]},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "tool_calls": [_call("d", "f", "{}")], "refusal": None},
        {"role": "tool", "tool_call_id": "d", "name": "f", "content": ""},
        {"role": "assistant", "content": None},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}],
        },
    ]
    assert _round_trip(messages) == messages


def test_unknown_keys_are_kept_verbatim() -> None:
    messages = [
        {"role": "user", "content": "hi", "x_trace": {"id": 7}},
        {"role": "assistant", "content": "yo", "audio": None, "annotations": []},
    ]
    assert _round_trip(messages) == messages


def test_image_parts_map_to_data_blocks_and_back() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]
    msg = from_openai_messages(messages)[0]
    assert msg.blocks()[1] == DataBlock(source=Base64Source(media_type="image/png", data=PNG))
    assert msg.blocks()[2] == DataBlock(
        source=URLSource(url="https://example.com/cat.jpg", media_type="image/jpeg")
    )
    assert _round_trip(messages) == messages


def test_audio_and_file_parts_round_trip() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
                {
                    "type": "file",
                    "file": {"file_data": "data:application/pdf;base64,JVBER", "filename": "a.pdf"},
                },
            ],
        }
    ]
    msg = from_openai_messages(messages)[0]
    assert [b.media_type for b in msg.get_blocks(DataBlock)] == [
        "audio/wav",
        "audio/mpeg",
        "application/pdf",
    ]
    assert _round_trip(messages) == messages


def test_unsupported_part_type_raises_naming_the_part() -> None:
    with pytest.raises(MessageFormatError, match=r"message 0: content\[1\]\.type must be one of"):
        from_openai_messages(
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video"}]}]
        )


def test_results_mixed_with_text_become_tool_messages_then_a_user_message() -> None:
    msgs = [
        Msg(
            "bot",
            [ToolCallBlock(id="a", name="f", input={}), ToolCallBlock(id="b", name="g", input={})],
            "assistant",
        ),
        Msg(
            "user",
            [
                TextBlock(text="also, hurry"),
                ToolResultBlock(id="a", name="f", output="1"),
                ToolResultBlock(id="b", name="g", output="2"),
            ],
            "user",
        ),
    ]
    wire = to_openai_messages(msgs)
    assert [m["role"] for m in wire] == ["assistant", "tool", "tool", "user"]
    assert [m.get("tool_call_id") for m in wire[1:3]] == ["a", "b"]
    assert wire[3]["content"] == "also, hurry"


def test_image_in_a_tool_result_follows_in_a_user_message() -> None:
    image = DataBlock(source=Base64Source(media_type="image/png", data=PNG))
    msgs = [
        Msg("bot", [ToolCallBlock(id="a", name="shot", input={})], "assistant"),
        Msg(
            "user",
            [ToolResultBlock(id="a", name="shot", output=[TextBlock(text="done"), image])],
            "user",
        ),
    ]
    wire = to_openai_messages(msgs)
    assert [m["role"] for m in wire] == ["assistant", "tool", "user"]
    assert wire[1]["content"].startswith("done\n")
    assert wire[2]["content"][0]["image_url"]["url"] == f"data:image/png;base64,{PNG}"


def test_hint_is_sent_as_wrapped_user_text() -> None:
    wire = to_openai_messages([Msg("user", [HintBlock(hint="be brief")], "user")])
    assert wire == [{"role": "user", "content": "<system-reminder>be brief</system-reminder>"}]


def test_hint_already_wrapped_is_not_wrapped_again() -> None:
    wire = to_openai_messages(
        [Msg("user", [HintBlock(hint="<system-reminder>x</system-reminder>")], "user")]
    )
    assert wire[0]["content"] == "<system-reminder>x</system-reminder>"


def test_hint_in_assistant_message_is_sent_after_its_tool_results() -> None:
    msgs = [
        Msg("bot", [ToolCallBlock(id="a", name="f", input={}), HintBlock(hint="h")], "assistant"),
        Msg("tool", [ToolResultBlock(id="a", name="f", output="1")], "user"),
    ]
    wire = to_openai_messages(msgs)
    assert [m["role"] for m in wire] == ["assistant", "tool", "user"]
    assert wire[2]["content"] == [{"type": "text", "text": "<system-reminder>h</system-reminder>"}]


def test_thinking_is_dropped_for_openai() -> None:
    msg = Msg(
        "bot", [ThinkingBlock(thinking="hmm", signature="s"), TextBlock(text="hi")], "assistant"
    )
    assert to_openai_messages([msg]) == [{"role": "assistant", "content": "hi"}]


def test_reasoning_content_of_an_answer_becomes_thinking() -> None:
    msg = from_openai_message({"role": "assistant", "content": "4", "reasoning_content": "2+2"})
    assert msg.blocks() == [ThinkingBlock(thinking="2+2"), TextBlock(text="4")]


def test_tool_call_in_a_user_message_raises() -> None:
    with pytest.raises(MessageFormatError, match="message 0: content"):
        to_openai_messages([Msg("user", [ToolCallBlock(id="a", name="f", input={})], "user")])


def test_audio_by_url_raises() -> None:
    block = DataBlock(source=URLSource(url="https://x/a.wav", media_type="audio/wav"))
    with pytest.raises(MessageFormatError, match="audio"):
        to_openai_messages([Msg("user", [block], "user")])


def test_tools_and_tool_choice() -> None:
    spec = ToolSpec(name="add", description="Add.", parameters={"type": "object", "properties": {}})
    assert to_openai_tools([spec]) == [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add.", "parameters": spec.parameters},
        }
    ]
    assert to_openai_tool_choice("auto") == "auto"
    assert to_openai_tool_choice("add") == {"type": "function", "function": {"name": "add"}}
