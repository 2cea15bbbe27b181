"""head/tail cut text to an exact token budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.token import OpenAITokenCounter, TokenSlicer, tiktoken_encoding

from .token_helpers import reference_count, swebench_texts

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


def _whole_text_tail(text: str, budget: int) -> str:
    """The cut from tokenizing all of ``text`` (what ``tail`` did before it encoded only a
    window at the end)."""
    enc = tiktoken_encoding("o200k_base")
    counter = OpenAITokenCounter("o200k_base")
    tokens = enc.encode(text, disallowed_special=())
    if len(tokens) <= budget:
        return text
    for keep in range(budget, 0, -1):
        raw = enc.decode_bytes(tokens[-keep:])
        start = 0
        while start < len(raw) and raw[start] & 0xC0 == 0x80:
            start += 1
        cut = raw[start:].decode("utf-8", errors="replace")
        if counter.count_text(cut) <= budget:
            return cut
    return ""


words = st.text(alphabet="abcxyz019 _./-:\n上下文🚀", min_size=1, max_size=10)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(words, max_size=400), budget=st.integers(min_value=1, max_value=80))
def test_the_windowed_tail_is_the_whole_text_cut_on_ordinary_text(
    parts: list[str], budget: int
) -> None:
    text = " ".join(parts)
    assert OpenAITokenCounter("o200k_base").tail(text, budget) == _whole_text_tail(text, budget)


def test_the_windowed_tail_is_the_whole_text_cut_on_recorded_tool_output() -> None:
    counter = OpenAITokenCounter("o200k_base")
    long_texts = [t for t in swebench_texts() if len(t) > 2_000]
    assert len(long_texts) >= 5
    for text in long_texts:
        for budget in (50, 500, 3_000):
            assert counter.tail(text, budget) == _whole_text_tail(text, budget)
