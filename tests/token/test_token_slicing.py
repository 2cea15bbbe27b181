"""head/tail cut text to an exact token budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.token import OpenAITokenCounter, TokenSlicer

from .token_helpers import reference_count

LOG = "".join(f"line {i}: status=ok elapsed={i * 7 % 13}ms 上下文 🚀\n" for i in range(200))


def test_openai_counter_is_a_token_slicer() -> None:
    assert isinstance(OpenAITokenCounter(), TokenSlicer)


def test_head_is_a_prefix_within_the_budget(encoding: str) -> None:
    counter = OpenAITokenCounter(encoding)
    cut = counter.head(LOG, 100)
    assert LOG.startswith(cut)
    assert 95 <= reference_count(encoding, cut) <= 100


def test_tail_is_a_suffix_within_the_budget(encoding: str) -> None:
    counter = OpenAITokenCounter(encoding)
    cut = counter.tail(LOG, 100)
    assert LOG.endswith(cut)
    assert 95 <= reference_count(encoding, cut) <= 100


def test_text_within_the_budget_is_returned_whole() -> None:
    counter = OpenAITokenCounter()
    n = counter.count_text(LOG)
    assert counter.head(LOG, n) == LOG
    assert counter.tail(LOG, n) == LOG


def test_tail_drops_a_character_split_by_the_cut_instead_of_garbling_it() -> None:
    counter = OpenAITokenCounter()
    cut = counter.tail("hello world 🧠🧠 foo", 3)
    assert "\ufffd" not in cut
    assert cut == " foo"


def test_zero_budget_gives_empty_text() -> None:
    counter = OpenAITokenCounter()
    assert counter.head(LOG, 0) == ""
    assert counter.tail(LOG, 0) == ""


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200), budget=st.integers(min_value=0, max_value=60))
def test_cuts_never_exceed_the_budget(text: str, budget: int) -> None:
    counter = OpenAITokenCounter("o200k_base")
    head, tail = counter.head(text, budget), counter.tail(text, budget)
    assert text.startswith(head)
    assert text.endswith(tail)
    assert reference_count("o200k_base", head) <= budget
    assert reference_count("o200k_base", tail) <= budget
