"""Behaviour of the Anthropic Messages converter, on histories in the documented wire format."""

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
    Usage,
    from_anthropic_message,
    from_anthropic_messages,
    to_anthropic_request,
    to_anthropic_tool_choice,
    to_anthropic_tools,
)

PNG = "iVBORw0KGgo="
SIG = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


def _round_trip(system: Any, messages: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    msgs = from_anthropic_messages(messages, system=system)
    return to_anthropic_request([Msg.model_validate_json(m.model_dump_json()) for m in msgs])


HISTORY: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these two images, then check the weather."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Two cities, two calls.", "signature": SIG},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "toolu_01A", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "weather", "input": {"city": "Rome"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01B",
                "content": [
                    {"type": "text", "text": "radar:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
                "is_error": True,
            },
            {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}},
        ],
    },
    {"role": "assistant", "content": "Paris is sunny; Rome's radar failed."},
]


def test_history_with_thinking_parallel_calls_and_images_round_trips() -> None:
    assert _round_trip("You are terse.", HISTORY) == ("You are terse.", HISTORY)


def test_system_as_blocks_round_trips() -> None:
    system = [{"type": "text", "text": "policy", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "hi"}]
    assert _round_trip(system, messages) == (system, messages)


def test_documents_and_explicit_false_error_flag_round_trip() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
                    "title": "spec",
                },
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.com/a.pdf"},
                    "citations": {"enabled": True},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [], "is_error": False}
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t2", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2"}]},
    ]
    assert _round_trip(None, messages) == ("", messages)


def test_history_maps_to_our_blocks() -> None:
    msgs = from_anthropic_messages(HISTORY)
    assert msgs[1].blocks()[:2] == [
        ThinkingBlock(thinking="Two cities, two calls.", signature=SIG),
        ThinkingBlock(thinking="", redacted="EmwKAhgBEgy3va3pzix"),
    ]
    assert msgs[1].tool_calls[1] == ToolCallBlock(
        id="toolu_01B", name="weather", input={"city": "Rome"}
    )
    result = msgs[2].tool_results[1]
    assert (result.name, result.is_error) == ("weather", True)
    assert msgs[0].blocks()[2] == DataBlock(
        source=URLSource(url="https://example.com/b.jpg", media_type="image/jpeg")
    )


def test_response_becomes_assistant_msg_with_usage_and_stop_reason() -> None:
    response = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "easy", "signature": SIG},
            {"type": "tool_use", "id": "toolu_9", "name": "add", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 3,
            "cache_creation_input_tokens": 0,
        },
    }
    msg = from_anthropic_message(response)
    assert msg.usage == Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3)
    assert msg.metadata["anthropic"]["response"]["stop_reason"] == "tool_use"
    assert msg.tool_calls == [ToolCallBlock(id="toolu_9", name="add", input={"a": 1})]
    _, wire = to_anthropic_request([msg])
    assert wire == [{"role": "assistant", "content": response["content"]}]


def test_non_object_tool_input_in_a_response_becomes_an_input_error() -> None:
    msg = from_anthropic_message(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "oops"}],
        }
    )
    call = msg.tool_calls[0]
    assert (call.input, call.raw_input) == ({}, "oops")
    assert call.input_error is not None
    assert "must be an object" in call.input_error


def test_non_object_tool_input_in_a_history_raises_naming_the_field() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}],
        }
    ]
    with pytest.raises(
        MessageFormatError, match=r"message 0: content\[0\]\.input must be an object, got an array"
    ):
        from_anthropic_messages(messages)


def test_unsigned_thinking_in_a_history_raises() -> None:
    messages = [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}]
    with pytest.raises(MessageFormatError, match="signature is missing"):
        from_anthropic_messages(messages)


def test_tool_result_in_an_assistant_message_raises() -> None:
    messages = [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]
    with pytest.raises(MessageFormatError, match=r"message 0: content\[0\]\.type"):
        from_anthropic_messages(messages)


def test_one_msg_per_result_is_merged_into_one_user_message_results_first() -> None:
    msgs = [
        Msg("user", "go", "user"),
        Msg("bot", [ToolCallBlock(id="a", name="f"), ToolCallBlock(id="b", name="f")], "assistant"),
        Msg("tool", [ToolResultBlock(id="a", name="f", output="1")], "user"),
        Msg("user", "and hurry", "user"),
        Msg("tool", [ToolResultBlock(id="b", name="f", output="2")], "user"),
    ]
    _, wire = to_anthropic_request(msgs)
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["type"] for b in wire[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert [b.get("tool_use_id") for b in wire[2]["content"][:2]] == ["a", "b"]


def test_leading_system_is_hoisted_and_a_later_one_becomes_a_hint() -> None:
    msgs = [
        Msg("system", "base", "system"),
        Msg("user", "hi", "user"),
        Msg("system", "now 10:00", "system"),
    ]
    system, wire = to_anthropic_request(msgs)
    assert system == "base"
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "text", "text": "<system-reminder>now 10:00</system-reminder>"},
            ],
        }
    ]


def test_hint_in_assistant_message_goes_to_the_next_user_message() -> None:
    msgs = [
        Msg("bot", [ToolCallBlock(id="a", name="f"), HintBlock(hint="h")], "assistant"),
        Msg("tool", [ToolResultBlock(id="a", name="f", output="1")], "user"),
    ]
    _, wire = to_anthropic_request(msgs)
    assert [b["type"] for b in wire[1]["content"]] == ["tool_result", "text"]
    assert wire[1]["content"][1]["text"] == "<system-reminder>h</system-reminder>"


def test_unsigned_thinking_and_blank_text_are_left_out() -> None:
    msg = Msg(
        "bot",
        [ThinkingBlock(thinking="from another model"), TextBlock(text=" "), TextBlock(text="ok")],
        "assistant",
    )
    assert to_anthropic_request([msg])[1] == [
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    ]


def test_base64_data_url_source_is_sent_as_base64() -> None:
    block = DataBlock(source=URLSource(url=f"data:image/png;base64,{PNG}"))
    _, wire = to_anthropic_request([Msg("user", [block], "user")])
    assert wire[0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": PNG,
    }


def test_data_url_type_decides_block_kind_over_declared_media_type() -> None:
    # The provider sees the data URL's own type, so the block kind follows it (as the
    # OpenAI converter does); a declared "application/pdf" used to send an image as a
    # document, which the reader then rejected.
    url = f"data:image/png;base64,{PNG}"
    block = DataBlock(source=URLSource(url=url, media_type="application/pdf"))
    system, wire = to_anthropic_request([Msg("user", [block], "user")])
    assert wire[0]["content"][0]["type"] == "image"
    again = from_anthropic_messages(wire, system=system or None, strict=False)
    assert to_anthropic_request(again) == (system, wire)


def test_audio_raises_naming_the_message() -> None:
    block = DataBlock(source=Base64Source(media_type="audio/wav", data="UklGRg=="))
    with pytest.raises(MessageFormatError, match="message 1: content"):
        to_anthropic_request([Msg("user", "x", "user"), Msg("user", [block], "user")])


def test_tools_and_tool_choice() -> None:
    spec = ToolSpec(name="add", description="Add.", parameters={"type": "object", "properties": {}})
    assert to_anthropic_tools([spec]) == [
        {"name": "add", "description": "Add.", "input_schema": spec.parameters}
    ]
    assert to_anthropic_tool_choice("required") == {"type": "any"}
    assert to_anthropic_tool_choice("add") == {"type": "tool", "name": "add"}
