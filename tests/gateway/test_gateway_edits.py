"""Anthropic's context edits as the gateway applies them: every knob of
``clear_tool_uses_20250919`` and ``clear_thinking_20251015``, pure and deterministic."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from contextfold.gateway import CLEARED_RESULT, EditError, apply_context_management
from contextfold.token import AnthropicEstimator

from .history import thinking_history, tool_history

COUNTER = AnthropicEstimator()


def request(messages: list[dict[str, Any]], *edits: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 100,
        "system": "You are terse.",
        "messages": messages,
        "context_management": {"edits": list(edits)},
    }


def clear(**knobs: Any) -> dict[str, Any]:
    return {"type": "clear_tool_uses_20250919", **knobs}


def tokens(n: int) -> dict[str, Any]:
    return {"type": "input_tokens", "value": n}


def results(body: dict[str, Any]) -> list[Any]:
    """Each tool result's content, in order."""
    return [
        b["content"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def inputs(body: dict[str, Any]) -> list[Any]:
    return [
        b["input"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def fresh_count(body: dict[str, Any]) -> int:
    """The body counted from scratch, with no edits."""
    return apply_context_management(body, COUNTER).input_tokens


def test_below_the_trigger_nothing_is_cleared_and_the_field_is_stripped() -> None:
    body = request(tool_history(6), clear())  # default trigger: 100k input tokens
    out = apply_context_management(body, COUNTER)
    assert out.applied_edits == ()
    assert out.body == {k: v for k, v in body.items() if k != "context_management"}
    assert out.input_tokens == out.original_input_tokens


def test_over_the_trigger_all_but_the_newest_keep_results_are_cleared() -> None:
    history = tool_history(6)
    out = apply_context_management(
        request(history, clear(trigger=tokens(1_000), keep={"type": "tool_uses", "value": 2})),
        COUNTER,
    )
    original = results({"messages": history})
    assert results(out.body) == [CLEARED_RESULT] * 4 + original[4:]
    assert inputs(out.body) == inputs({"messages": history})  # inputs kept by default
    (applied,) = out.applied_edits
    assert applied == {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": 4,
        "cleared_input_tokens": out.original_input_tokens - out.input_tokens,
    }
    assert applied["cleared_input_tokens"] > 4 * 300
    assert out.input_tokens == fresh_count(out.body)


def test_a_cleared_result_keeps_its_pairing_and_its_other_keys() -> None:
    out = apply_context_management(request(tool_history(5), clear(trigger=tokens(0))), COUNTER)
    first = out.body["messages"][2]["content"][0]
    assert first == {
        "type": "tool_result",
        "tool_use_id": "toolu_00",
        "content": CLEARED_RESULT,
        "cache_control": {"type": "ephemeral"},
    }
    call = out.body["messages"][1]["content"][1]
    assert (call["type"], call["id"], call["name"]) == ("tool_use", "toolu_00", "bash")


def test_the_default_keep_is_three() -> None:
    out = apply_context_management(request(tool_history(5), clear(trigger=tokens(0))), COUNTER)
    assert results(out.body)[:2] == [CLEARED_RESULT] * 2
    assert CLEARED_RESULT not in results(out.body)[2:]


@pytest.mark.parametrize(("value", "fires"), [(5, True), (6, False)])
def test_a_tool_uses_trigger_fires_when_the_prompt_has_more_uses(value: int, fires: bool) -> None:
    trigger = {"type": "tool_uses", "value": value}
    out = apply_context_management(request(tool_history(6), clear(trigger=trigger)), COUNTER)
    assert bool(out.applied_edits) is fires


def test_clear_at_least_skips_an_edit_that_saves_too_little() -> None:
    history = tool_history(6)
    knobs = {"trigger": tokens(0), "keep": {"type": "tool_uses", "value": 2}}
    possible = apply_context_management(request(history, clear(**knobs)), COUNTER)
    saving = possible.applied_edits[0]["cleared_input_tokens"]
    too_much = clear(**knobs, clear_at_least=tokens(saving + 1))
    skipped = apply_context_management(request(history, too_much), COUNTER)
    assert skipped.applied_edits == ()
    assert skipped.body["messages"] == history
    enough = clear(**knobs, clear_at_least=tokens(saving))
    assert apply_context_management(request(history, enough), COUNTER).body == possible.body


def test_excluded_tools_are_never_cleared_nor_counted_toward_keep() -> None:
    history = tool_history(8)  # bash at even steps, read at odd ones
    edit = clear(trigger=tokens(0), keep={"type": "tool_uses", "value": 1}, exclude_tools=["read"])
    out = apply_context_management(request(history, edit), COUNTER)
    got, original = results(out.body), results({"messages": history})
    assert [i for i, r in enumerate(got) if r == CLEARED_RESULT] == [0, 2, 4]
    assert [got[i] for i in (1, 3, 5, 6, 7)] == [original[i] for i in (1, 3, 5, 6, 7)]
    assert out.applied_edits[0]["cleared_tool_uses"] == 3


@pytest.mark.parametrize(
    ("clear_inputs", "emptied"), [(True, [0, 1, 2]), (["read"], [1]), (False, [])]
)
def test_clear_tool_inputs_empties_the_inputs_of_the_named_or_all_tools(
    clear_inputs: Any, emptied: list[int]
) -> None:
    history = tool_history(6)
    edit = clear(trigger=tokens(0), clear_tool_inputs=clear_inputs)
    out = apply_context_management(request(history, edit), COUNTER)
    got, original = inputs(out.body), inputs({"messages": history})
    assert [i for i, v in enumerate(got) if v == {}] == emptied
    assert all(got[i] == original[i] for i in range(6) if i not in emptied)


def test_the_same_history_yields_the_same_bytes_and_the_input_is_not_changed() -> None:
    body = request(tool_history(7), clear(trigger=tokens(0), clear_tool_inputs=True))
    before = copy.deepcopy(body)
    first = apply_context_management(body, COUNTER)
    second = apply_context_management(copy.deepcopy(body), AnthropicEstimator())
    assert body == before
    assert json.dumps(first.body) == json.dumps(second.body)
    assert first.applied_edits == second.applied_edits


def test_clear_thinking_keeps_the_newest_turns_and_treats_a_tool_loop_as_one_turn() -> None:
    history = thinking_history(4)
    edit = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    out = apply_context_management(request(history, edit), COUNTER)
    kinds = [
        [b["type"] for b in m["content"]] for m in out.body["messages"] if m["role"] == "assistant"
    ]
    cleared = [["tool_use"], ["text"]] * 3
    assert kinds == [*cleared, ["thinking", "tool_use"], ["redacted_thinking", "text"]]
    (applied,) = out.applied_edits
    assert applied["type"] == "clear_thinking_20251015"
    assert applied["cleared_thinking_turns"] == 3
    assert applied["cleared_input_tokens"] == out.original_input_tokens - out.input_tokens > 0
    assert out.input_tokens == fresh_count(out.body)


@pytest.mark.parametrize("keep", ["all", {"type": "all"}, {"type": "thinking_turns", "value": 9}])
def test_clear_thinking_that_keeps_everything_changes_nothing(keep: Any) -> None:
    history = thinking_history(3)
    edit = {"type": "clear_thinking_20251015", "keep": keep}
    out = apply_context_management(request(history, edit), COUNTER)
    assert out.applied_edits == ()
    assert out.body["messages"] == history


def test_both_edits_apply_in_order_and_are_both_reported() -> None:
    history = thinking_history(4)
    edits = (
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
        clear(trigger=tokens(0), keep={"type": "tool_uses", "value": 1}, clear_tool_inputs=True),
    )
    out = apply_context_management(request(history, *edits), COUNTER)
    assert [e["type"] for e in out.applied_edits] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
    ]
    assert out.applied_edits[0]["cleared_thinking_turns"] == 2
    assert out.applied_edits[1]["cleared_tool_uses"] == 3
    saved = sum(e["cleared_input_tokens"] for e in out.applied_edits)
    assert saved == out.original_input_tokens - out.input_tokens


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ([clear(), {"type": "clear_thinking_20251015"}], "must come first"),
        ([{"type": "clear_everything"}], "expected one of"),
        ([clear(keep={"type": "tool_uses", "value": -1})], "keep.value"),
        ([clear(trigger={"type": "messages", "value": 3})], "trigger.type"),
        ([clear(exclude_tools="bash")], "exclude_tools"),
        ([clear(), clear()], "more than once"),
        ([clear(surprise=1)], "unexpected field"),
    ],
)
def test_a_malformed_edit_is_refused_naming_the_field(
    edits: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(EditError, match=message):
        apply_context_management(request(tool_history(2), *edits), COUNTER)


def test_a_request_without_the_field_is_counted_and_left_alone() -> None:
    body = request(tool_history(3))
    del body["context_management"]
    out = apply_context_management(body, COUNTER)
    assert not out.requested
    assert out.body == body
    assert out.input_tokens > 0


def test_a_result_shorter_than_the_placeholder_is_left_as_it_is() -> None:
    history = thinking_history(3)  # results are "a.py"
    out = apply_context_management(
        request(history, clear(trigger=tokens(0), keep={"type": "tool_uses", "value": 0})), COUNTER
    )
    assert out.applied_edits == ()
    assert out.body["messages"] == history


def test_what_claude_code_sends_is_applied_without_counting_the_request() -> None:
    class Counting(AnthropicEstimator):
        calls = 0

        def count_message(self, msg: Any) -> int:
            Counting.calls += 1
            return super().count_message(msg)

    edit = {"type": "clear_thinking_20251015", "keep": "all"}
    out = apply_context_management(request(thinking_history(3), edit), Counting())
    assert out.applied_edits == ()
    assert out.tokens_saved == 0
    assert Counting.calls == 0  # the 100k-token case costs no counting
    assert out.input_tokens == fresh_count(out.body)  # counted when asked
    assert Counting.calls > 0


def test_a_sessions_next_request_counts_only_what_is_new() -> None:
    from contextfold.gateway import CountCache

    class Counting(AnthropicEstimator):
        calls = 0

        def count_message(self, msg: Any) -> int:
            Counting.calls += 1
            return super().count_message(msg)

    cache, counter = CountCache(), Counting()
    edit = clear(trigger=tokens(150_000))  # needs the whole request's count
    history = tool_history(6)
    first = apply_context_management(request(history, edit), counter, cache=cache)
    assert (
        first.input_tokens == apply_context_management(request(history, edit), COUNTER).input_tokens
    )
    before = Counting.calls
    later = [
        *history,
        {"role": "assistant", "content": "Linted."},
        {"role": "user", "content": "Commit."},
    ]
    second = apply_context_management(request(later, edit), counter, cache=cache)
    assert (
        second.input_tokens == apply_context_management(request(later, edit), COUNTER).input_tokens
    )
    assert Counting.calls - before == 2  # the two new messages
    assert cache.hits == len(history) + 1  # and the system prompt with the tools


def test_the_count_cache_is_bounded() -> None:
    from contextfold.gateway import CountCache

    cache = CountCache(size=3)
    for i in range(5):
        cache.count(COUNTER, {"role": "user", "content": f"message {i}"})
    cache.count(COUNTER, {"role": "user", "content": "message 0"})
    assert cache.misses == 6
    assert len(cache._counts) == 3
