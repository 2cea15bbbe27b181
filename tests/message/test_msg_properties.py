"""Invariants over random messages: JSON round-trips, converter fixed points, and garbage
in gives ``MessageFormatError`` (never another exception)."""

import contextlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold._exceptions import MessageFormatError
from contextfold.message import (
    Msg,
    check_provider_valid,
    from_anthropic_message,
    from_anthropic_messages,
    from_openai_message,
    from_openai_messages,
    to_anthropic_request,
    to_openai_messages,
)

from .strategies import ids, json_scalar, json_value, media, msg, msgs, text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# plausible but broken wire messages: the converters' vocabulary with random values
keys = st.sampled_from(
    [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "type",
        "text",
        "image_url",
        "url",
        "function",
        "arguments",
        "id",
        "input",
        "source",
        "data",
        "media_type",
        "tool_use_id",
        "is_error",
        "signature",
        "thinking",
        "input_audio",
        "format",
        "file",
        "file_data",
        "usage",
        "refusal",
        "detail",
        "title",
    ]
)
wire_value = st.recursive(
    json_scalar
    | st.sampled_from(
        [
            "user",
            "assistant",
            "tool",
            "system",
            "text",
            "image",
            "tool_use",
            "tool_result",
            "function",
            "base64",
            "url",
            "image_url",
            "thinking",
        ]
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=15,
)


@SETTINGS
@given(msg)
def test_any_msg_round_trips_through_json(m: Msg) -> None:
    assert Msg.model_validate_json(m.model_dump_json()) == m


@SETTINGS
@given(msgs)
def test_openai_conversion_succeeds_or_raises_message_format_error(ms: list[Msg]) -> None:
    try:
        wire = to_openai_messages(ms)
    except MessageFormatError:
        return
    assert to_openai_messages(from_openai_messages(wire, strict=False)) == wire


@SETTINGS
@given(msgs)
def test_anthropic_conversion_succeeds_or_raises_message_format_error(ms: list[Msg]) -> None:
    try:
        system, wire = to_anthropic_request(ms)
    except MessageFormatError:
        return
    again = from_anthropic_messages(wire, system=system or None, strict=False)
    assert to_anthropic_request(again) == (system, wire)


@SETTINGS
@given(msgs)
def test_validity_checker_never_raises(ms: list[Msg]) -> None:
    for provider in ("openai", "anthropic"):
        problems = check_provider_valid(ms, provider=provider)  # type: ignore[arg-type]
        assert all(p.index >= 0 for p in problems)


TYPES = [
    "text",
    "image_url",
    "input_audio",
    "file",
    "refusal",
    "image",
    "document",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
]
source_dict = st.fixed_dictionaries(
    {"type": st.sampled_from(["base64", "url"])},
    optional={"media_type": media | wire_value, "data": text, "url": text},
)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES)},
    optional={
        "text": text | wire_value,
        "image_url": st.fixed_dictionaries({"url": text}) | wire_value,
        "input_audio": st.fixed_dictionaries({"data": text, "format": text}) | wire_value,
        "file": st.fixed_dictionaries({"file_data": text}) | wire_value,
        "source": source_dict | wire_value,
        "id": ids | wire_value,
        "name": text,
        "input": st.dictionaries(text, json_value, max_size=2) | wire_value,
        "tool_use_id": ids,
        "content": text
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(TYPES)}, optional={"text": text, "source": source_dict}
            )
        )
        | wire_value,
        "is_error": st.booleans() | wire_value,
        "signature": text | wire_value,
        "thinking": text,
        "data": text,
        "refusal": text,
        "title": text | wire_value,
    },
)
call = st.fixed_dictionaries(
    {"id": ids, "type": st.just("function")},
    optional={
        "function": st.fixed_dictionaries(
            {"name": text},
            optional={"arguments": st.sampled_from(["{}", '{"a":1}', "[", "1", ""]) | wire_value},
        )
        | wire_value
    },
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"])},
    optional={
        "content": text | st.none() | st.lists(part, max_size=3) | wire_value,
        "tool_calls": st.lists(call, max_size=2) | wire_value,
        "tool_call_id": ids | wire_value,
        "name": text | wire_value,
        "usage": st.fixed_dictionaries({"input_tokens": st.integers(0, 9)}) | wire_value,
    },
)
GARBAGE = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@GARBAGE
@given(st.lists(message, max_size=4) | st.lists(message | wire_value, max_size=3) | wire_value)
def test_garbage_wire_input_raises_only_message_format_error(garbage: Any) -> None:
    for convert in (
        lambda g: from_openai_messages(g),
        lambda g: from_openai_messages(g, strict=False),
        lambda g: from_anthropic_messages(g),
        lambda g: from_anthropic_messages(g, strict=False),
        from_openai_message,
        from_anthropic_message,
    ):
        with contextlib.suppress(MessageFormatError):
            convert(garbage)
