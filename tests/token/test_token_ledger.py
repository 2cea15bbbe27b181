"""RunningTotal keeps the sum of message counts as messages come and go."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.message import Msg
from contextfold.token import OpenAITokenCounter, RunningTotal


def _msgs(n: int) -> list[Msg]:
    return [Msg("user", f"message number {i} " * (i % 5 + 1), "user") for i in range(n)]


def test_total_is_the_sum_of_message_counts() -> None:
    counter = OpenAITokenCounter()
    msgs = _msgs(20)
    ledger = RunningTotal(counter, msgs)
    assert ledger.total == sum(counter.count_message(m) for m in msgs)
    assert len(ledger) == 20


def test_pop_front_removes_the_oldest_counts() -> None:
    counter = OpenAITokenCounter()
    msgs = _msgs(10)
    ledger = RunningTotal(counter, msgs)
    removed = ledger.pop_front(4)
    assert removed == sum(counter.count_message(m) for m in msgs[:4])
    assert ledger.total == sum(counter.count_message(m) for m in msgs[4:])


def test_pop_front_beyond_the_length_is_refused() -> None:
    ledger = RunningTotal(OpenAITokenCounter(), _msgs(2))
    with pytest.raises(ValueError, match="cannot drop 3 of 2"):
        ledger.pop_front(3)


def test_appending_uses_the_count_cached_on_the_message() -> None:
    counter = OpenAITokenCounter()
    msg = _msgs(1)[0]
    msg.cache_tokens(counter.name, 1000)
    ledger = RunningTotal(counter)
    assert ledger.append(msg) == 1000
    assert ledger.total == 1000


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.one_of(st.integers(1, 3), st.just(-1), st.just(0)), max_size=30))
def test_total_matches_a_recount_after_any_sequence_of_operations(ops: list[int]) -> None:
    counter = OpenAITokenCounter()
    ledger = RunningTotal(counter)
    live: list[Msg] = []
    fresh = iter(_msgs(200))
    for op in ops:
        if op > 0:
            new = [next(fresh) for _ in range(op)]
            ledger.extend(new)
            live += new
        elif op == -1 and live:
            ledger.pop()
            live.pop()
        elif op == 0 and live:
            ledger.pop_front(1)
            live.pop(0)
    assert ledger.total == sum(counter.count_message(m) for m in live)
    assert ledger.counts() == [counter.count_message(m) for m in live]
