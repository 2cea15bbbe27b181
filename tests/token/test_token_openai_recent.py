"""The counter remembers the last few long texts; what it answers never changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.token import OpenAITokenCounter

COUNTER = OpenAITokenCounter()
FRESH = OpenAITokenCounter()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=1500), min_size=1, max_size=20))
def test_remembered_counts_equal_fresh_counts(texts: list[str]) -> None:
    for text in [*texts, *reversed(texts)]:
        assert COUNTER.count_text(text) == (FRESH._tokenize(text) if text else 0)


def test_only_a_few_texts_are_remembered() -> None:
    counter = OpenAITokenCounter()
    for i in range(50):
        counter.count_text(f"line {i} " * 200)
    assert len(counter._recent) <= 9
