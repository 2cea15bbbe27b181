"""HeadTailCut, the one head/tail cut: within budget, a prefix and a suffix, a marker iff cut."""

from __future__ import annotations

from fractions import Fraction
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.context._cut import HeadTailCut
from contextfold.token import AnthropicEstimator, OpenAITokenCounter, TokenCounter

MARK = "\u00a7"
"""In every marker and end, never in a text: where the head ends can be found."""


class _Chars:
    """Four characters a token, rounded up; cannot slice, so the cut searches."""

    name = "chars/4"
    exact = False

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4


class _Merging:
    """A character a token, and ``ab`` three more: a head ending in ``a`` before a marker
    starting with ``b`` costs more than its parts, as tokens merging across a cut can."""

    name = "merging"
    exact = False

    def count_text(self, text: str) -> int:
        return len(text) + 3 * text.count("ab")


COUNTERS: list[TokenCounter] = [
    OpenAITokenCounter("o200k_base"),
    OpenAITokenCounter("cl100k_base"),
    AnthropicEstimator(),
    cast(TokenCounter, _Chars()),
    cast(TokenCounter, _Merging()),
]

texts = st.one_of(
    # No lone surrogates: no tokenizer encodes them (messages are valid UTF-8).
    st.text(
        alphabet=st.characters(blacklist_characters=MARK, blacklist_categories=("Cs",)),
        max_size=600,
    ),
    st.text(alphabet="ab \n", max_size=400),
    st.lists(
        st.sampled_from(["def f(x):\n", "    return x\n", "日本語 ", "🚀", "error: no\n"])
    ).map("".join),
)
policies = st.builds(
    HeadTailCut,
    head_share=st.sampled_from([Fraction(0), Fraction(1, 3), Fraction(1, 2), Fraction(2, 3), 1]),
    marker=st.sampled_from([f"b{MARK}", f"\n[{MARK} cut {MARK}]\n", f" [{MARK}...]"]),
    marker_room=st.one_of(st.none(), st.integers(min_value=0, max_value=20)),
    end=st.sampled_from(["", f"\n<<<{MARK}TRUNCATED>>>", f"b{MARK}end"]),
)


def _parts(policy: HeadTailCut, result: str) -> tuple[str, str] | None:
    """The head and the tail of a cut ``result``; ``None`` when it has no marker."""
    assert isinstance(policy.marker, str)
    if not result.endswith(policy.end) or policy.marker not in result:
        return None
    body = result[: len(result) - len(policy.end)]
    head, _, tail = body.partition(policy.marker)
    return head, tail


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(COUNTERS),
    texts,
    st.integers(min_value=-5, max_value=300),
    policies,
)
def test_a_cut_is_within_budget_a_head_and_a_tail_with_a_marker_iff_cut(
    counter: TokenCounter, text: str, budget: int, policy: HeadTailCut
) -> None:
    total = counter.count_text(text)
    result = policy.cut(counter, text, budget)
    bare = policy.bare(total)
    # Never over the budget, unless nothing fits beside the marker and the end.
    assert counter.count_text(result) <= max(budget, counter.count_text(bare))
    if total <= budget:
        assert result == text  # not cut: whole, and no marker
        assert MARK not in result
        return
    assert MARK in result  # cut: the marker (or the end) says so
    if result == bare:  # nothing of the text fitted beside them
        return
    parts = _parts(policy, result)
    assert parts is not None
    head, tail = parts
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + len(tail) < len(text)  # never overlapping, and something went
    if policy.head_share == 1:
        assert tail == ""
    if policy.head_share == 0:
        assert head == ""


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(COUNTERS), texts, st.integers(min_value=40, max_value=300))
def test_a_computed_marker_counts_the_tokens_left_out(
    counter: TokenCounter, text: str, budget: int
) -> None:
    policy = HeadTailCut(
        head_share=Fraction(1, 2),
        marker=lambda n: f"\n[{MARK} {n} tokens omitted]\n",
        marker_room=16,
        end=f"\n{MARK}",
    )
    result = policy.cut(counter, text, budget)
    total = counter.count_text(text)
    assert counter.count_text(result) <= max(budget, counter.count_text(policy.bare(total)))
    if total > budget and result != policy.bare(total):
        head, rest = result.split(f"\n[{MARK} ", 1)
        omitted, tail = rest.split(" tokens omitted]\n", 1)
        tail = tail.removesuffix(f"\n{MARK}")
        assert text.startswith(head)
        assert text.endswith(tail)
        assert int(omitted) == max(total - counter.count_text(head) - counter.count_text(tail), 0)


def test_tokens_merging_across_the_cut_are_cut_again() -> None:
    counter = cast(TokenCounter, _Merging())
    policy = HeadTailCut(marker="b]")
    # The head "aaaa" meets the marker's "b": 4 + 2 + 3 = 9 tokens, 3 over; the next cut
    # is 3 tokens smaller: "a" + "b]" costs 1 + 2 + 3 = 6.
    assert policy.cut(counter, "a" * 20, 6) == "ab]"


def test_the_split_follows_the_head_share() -> None:
    counter = cast(TokenCounter, _Chars())
    text = "".join(f"{i:04d}" for i in range(100))  # 400 characters, 100 tokens
    cut = HeadTailCut(head_share=Fraction(2, 3), marker=MARK * 4).cut(counter, text, 31)
    head, tail = cut.split(MARK * 4)
    assert (len(head), len(tail)) == (4 * 20, 4 * 10)


def test_a_bare_cut_is_the_end_without_its_leading_space_else_the_marker() -> None:
    assert HeadTailCut(marker="[cut]", end="\n<<<END>>>").bare(100) == "<<<END>>>"
    assert HeadTailCut(marker=" [...]").bare(100) == " [...]"
    assert HeadTailCut(marker=lambda n: f"[{n} cut]", marker_room=4).bare(100) == "[100 cut]"
