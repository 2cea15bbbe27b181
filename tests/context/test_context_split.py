"""Pair-safe splitting: tool calls never leave without their results."""

from __future__ import annotations

from contextfold.context._trim import choose_split, safe_boundaries
from contextfold.message import Msg, ThinkingBlock, ToolCallBlock

from .ctx_support import call, results, user


def test_boundary_inside_a_tool_exchange_is_unsafe() -> None:
    asst = call("read")
    msgs = [user("hi"), asst, results(asst, "ok"), user("next")]
    assert safe_boundaries(msgs) == [True, True, False, True, True]


def test_parallel_calls_answered_in_two_messages_stay_together() -> None:
    asst = call("a", "b")
    first, second = asst.tool_calls
    part1 = results(Msg("x", [first], "assistant"), "1")
    part2 = results(Msg("x", [second], "assistant"), "2")
    msgs = [asst, part1, part2, user("done")]
    assert safe_boundaries(msgs) == [True, False, False, True, True]


def test_interleaved_batches_are_one_unit() -> None:
    a1, a2 = call("a"), call("b")
    msgs = [a1, a2, results(a1, "1"), results(a2, "2")]
    assert safe_boundaries(msgs) == [True, False, False, False, True]


def test_pending_call_keeps_everything_after_it() -> None:
    asst = call("slow")
    msgs = [user("go"), asst, user("while waiting")]
    assert safe_boundaries(msgs) == [True, True, False, False]


def test_thinking_moves_with_its_tool_call() -> None:
    asst = Msg(
        "a",
        [ThinkingBlock(thinking="hmm", signature="sig"), ToolCallBlock(id="t1", name="x")],
        "assistant",
    )
    msgs = [user("q"), asst, results(asst, "r")]
    safe = safe_boundaries(msgs)
    assert safe[2] is False  # the thinking+call message cannot be cut from its result


def test_split_keeps_the_longest_suffix_within_budget() -> None:
    assert choose_split([10, 10, 10, 10], [True] * 5, 25) == 2


def test_split_moves_back_to_a_safe_boundary() -> None:
    # Boundary 2 would fit but is unsafe; the next safe one keeps less.
    assert choose_split([10, 10, 10, 10], [True, True, False, True, True], 25) == 3


def test_split_with_pending_call_returns_last_safe_boundary() -> None:
    assert choose_split([10, 100, 100], [True, True, False, False], 50) == 1


def test_split_is_linear_on_long_histories() -> None:
    n = 200_000
    k = choose_split([1] * n, [True] * (n + 1), 10)
    assert k == n - 10
