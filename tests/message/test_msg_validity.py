"""The provider-validity checker: tool calls paired with results, per provider rules."""

import json
from pathlib import Path

import pytest

from contextfold._exceptions import MessageFormatError
from contextfold.message import (
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ValidityProblem,
    assert_provider_valid,
    check_anthropic_request,
    check_anthropic_valid,
    check_openai_request,
    check_openai_valid,
    from_openai_messages,
    to_anthropic_request,
)

TAU = Path(__file__).parents[2] / "data" / "trajectories" / "tau-bench-airline-gpt4o"


def _call(*ids: str) -> Msg:
    return Msg("bot", [ToolCallBlock(id=i, name="f") for i in ids], "assistant")


def _result(*ids: str) -> Msg:
    return Msg("tool", [ToolResultBlock(id=i, name="f", output="ok") for i in ids], "user")


def test_paired_calls_are_valid_for_both_providers() -> None:
    msgs = [
        Msg("user", "go", "user"),
        _call("a", "b"),
        _result("a"),
        _result("b"),
        _call("c"),
        _result("c"),
    ]
    assert check_openai_valid(msgs) == []
    assert check_anthropic_valid(msgs) == []


def test_all_tau_bench_runs_are_valid_for_both_providers() -> None:
    runs = json.loads((TAU / "gpt-4o-airline.json").read_text())
    for run in runs:
        msgs = from_openai_messages(run["traj"])
        assert check_openai_valid(msgs) == [], run["task_id"]
        assert check_anthropic_valid(msgs) == [], run["task_id"]


def test_call_without_result_before_next_assistant_turn_is_reported() -> None:
    msgs = [Msg("user", "go", "user"), _call("a", "b"), _result("a"), _call("c"), _result("c")]
    assert check_openai_valid(msgs) == [
        ValidityProblem(1, "tool call 'b' has no result before the next assistant turn")
    ]


def test_trailing_call_without_result_is_reported() -> None:
    problems = check_anthropic_valid([Msg("user", "go", "user"), _call("a")])
    assert problems == [ValidityProblem(1, "tool call 'a' has no result")]


def test_result_without_call_is_reported() -> None:
    problems = check_openai_valid([Msg("user", "go", "user"), _result("zzz")])
    assert [p.index for p in problems] == [1]
    assert "never made" in problems[0].problem


def test_duplicate_call_id_in_one_turn_is_reported() -> None:
    msgs = [_call("a", "a"), _result("a")]
    assert ValidityProblem(0, "tool call id 'a' is used twice in one turn") in check_openai_valid(
        msgs
    )


def test_id_reused_in_a_later_turn_is_valid_and_renamed_for_anthropic() -> None:
    msgs = [Msg("user", "go", "user"), _call("a"), _result("a"), _call("a"), _result("a")]
    assert check_openai_valid(msgs) == []
    assert check_anthropic_valid(msgs) == []
    _, wire = to_anthropic_request(msgs)
    assert [wire[k]["content"][0]["id"] for k in (1, 3)] == ["a", "a_2"]
    assert wire[4]["content"][0]["tool_use_id"] == "a_2"


def test_ids_with_unsupported_characters_are_sanitized_for_anthropic() -> None:
    msgs = [Msg("user", "go", "user"), _call("functions.f:0"), _result("functions.f:0")]
    _, wire = to_anthropic_request(msgs)
    assert wire[1]["content"][0]["id"] == wire[2]["content"][0]["tool_use_id"] == "functions_f_0"


def test_second_result_for_one_call_is_reported() -> None:
    msgs = [_call("a"), _result("a"), _result("a")]
    assert check_anthropic_valid(msgs) == [ValidityProblem(2, "tool call 'a' has a second result")]


def test_user_text_between_calls_and_results_breaks_openai_but_not_anthropic() -> None:
    msgs = [_call("a"), Msg("user", "wait", "user"), _result("a")]
    assert check_anthropic_valid(msgs) == []
    problems = check_openai_valid(msgs)
    assert problems
    assert problems[0].index == 0
    assert "right after" in problems[0].problem


def test_unconvertible_content_is_reported_as_a_problem() -> None:
    msgs = [Msg("user", [ToolCallBlock(id="a", name="f")], "user")]
    problems = check_openai_valid(msgs)
    assert problems[0].index == 0


def test_assert_provider_valid_raises_listing_problems() -> None:
    with pytest.raises(MessageFormatError, match=r"openai: message 0: tool call 'a' has no result"):
        assert_provider_valid([_call("a")])


def test_assert_provider_valid_accepts_a_valid_history() -> None:
    assert_provider_valid([Msg("user", "hi", "user"), Msg("bot", "hello", "assistant")])


def test_openai_wire_checker_finds_a_user_message_before_tool_messages() -> None:
    wire = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
    ]
    problems = check_openai_request(wire)
    assert [p.index for p in problems] == [0, 2]


def test_anthropic_wire_checker_finds_results_after_text_and_broken_alternation() -> None:
    wire = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "a"}],
        },
        {"role": "user", "content": "again"},
    ]
    problems = [str(p) for p in check_anthropic_request(wire)]
    assert problems == [
        "message 1: tool_result blocks must come before any other content",
        "message 2: two user messages in a row; Anthropic needs alternation",
    ]


def test_anthropic_wire_checker_rejects_ids_with_unsupported_characters() -> None:
    wire = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a.b", "name": "f", "input": {}}],
        }
    ]
    assert "must match" in check_anthropic_request(wire)[0].problem


def test_tool_call_in_user_msg_is_reported() -> None:
    msgs = [Msg("user", [TextBlock(text="x"), ToolCallBlock(id="a", name="f")], "user")]
    assert check_anthropic_valid(msgs)[0] == ValidityProblem(0, "a user message holds tool calls")
