"""Infinity and NaN in free-form fields survive the JSON form of messages and blocks."""

from __future__ import annotations

import json
import math

from contextfold.message import (
    Msg,
    ToolCallBlock,
    ToolResultBlock,
    from_openai_messages,
    msgs_from_jsonl,
    msgs_to_jsonl,
)

INF = float("inf")


def test_infinity_in_metadata_round_trips_through_json() -> None:
    msg = Msg("user", "x", "user", metadata={"hi": INF, "lo": -INF})
    assert Msg.model_validate_json(msg.model_dump_json()) == msg


def test_nan_in_metadata_is_read_back_as_nan() -> None:
    # NaN never equals itself, so the message cannot compare equal; check the value.
    msg = Msg("user", "x", "user", metadata={"n": math.nan})
    assert math.isnan(Msg.model_validate_json(msg.model_dump_json()).metadata["n"])


def test_non_finite_values_are_written_as_json_constants_not_null() -> None:
    text = Msg("user", "x", "user", metadata={"a": INF, "b": math.nan}).model_dump_json()
    assert json.loads(text)["metadata"]["a"] == INF
    assert '"b":NaN' in text


def test_non_finite_tool_call_input_round_trips_inside_a_message() -> None:
    msg = Msg("a", [ToolCallBlock(id="c", name="t", input={"x": -INF})], "assistant")
    assert Msg.model_validate_json(msg.model_dump_json()) == msg


def test_non_finite_tool_result_metadata_round_trips_on_its_own() -> None:
    block = ToolResultBlock(id="c", name="t", output="o", metadata={"score": INF})
    assert ToolResultBlock.model_validate_json(block.model_dump_json()) == block


def test_non_finite_unknown_provider_field_round_trips_through_jsonl() -> None:
    (msg,) = from_openai_messages([{"role": "user", "content": "x", "usage": INF}])
    assert msgs_from_jsonl(msgs_to_jsonl([msg])) == [msg]
