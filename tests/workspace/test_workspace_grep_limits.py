"""Grep compiles only patterns whose repeats stay small (``workspace/_grep.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.workspace._grep import (
    MAX_PATTERN_LENGTH,
    MAX_REPEAT_EXPANSION,
    Searcher,
    check_pattern_size,
)


def _matches(pattern: str, line: str) -> bool:
    searcher = Searcher(pattern, timeout=5.0, max_results=10, context=0)
    searcher.search("item", [line])
    return [m.line for m in searcher.matches] == [line]


@pytest.mark.parametrize(
    "pattern",
    [
        "a{99999999}",
        "((a{1000}){1000}){1000}",
        "a{10001}",
        "a{20000,}",  # regex preallocates the minimum of an open repeat
        "a{0,20000}",
        "a{9999}b{9999}",  # siblings add up
        "(x|y{6000}|z{6000})",  # every alternative is compiled
    ],
)
def test_large_repeat_expansion_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="repeats too much"):
        Searcher(pattern, timeout=1.0, max_results=1, context=0)


def test_largest_allowed_single_repeat_compiles() -> None:
    assert _matches(f"a{{{MAX_REPEAT_EXPANSION}}}", "a" * MAX_REPEAT_EXPANSION)


def test_small_count_still_matches() -> None:
    assert _matches("a{5}", "xaaaaay")


def test_repeated_group_still_matches() -> None:
    assert _matches("(ab){3}x", "abababx")


def test_unbounded_repeats_count_once() -> None:
    check_pattern_size(r"(a+)+(.*)b*c?" * 20)  # would raise if * and + were counted


def test_overlong_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match="characters long"):
        Searcher("a" * (MAX_PATTERN_LENGTH + 1), timeout=1.0, max_results=1, context=0)


@pytest.mark.parametrize("pattern", ["(?x)a{9999 9999}", "(?x)a{9#}\n9999999}", "(?x:a{99 999})"])
def test_verbose_counts_with_blanks_or_comments_are_measured_as_regex_reads_them(
    pattern: str,
) -> None:
    # The stdlib parser reads these braces as literals; regex reads a huge count.
    with pytest.raises(ValueError, match="repeats too much"):
        check_pattern_size(pattern)


def test_regex_only_syntax_with_a_small_count_still_matches() -> None:
    assert _matches(r"\p{L}{3}", "abc")


@pytest.mark.parametrize("pattern", [r"\p{L}{99999999}", "(?V1)([)]a{1000}b){1000}"])
def test_regex_only_syntax_with_a_huge_count_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="repeats too much"):
        check_pattern_size(pattern)


def test_deeply_nested_groups_are_a_value_error() -> None:
    depth = (MAX_PATTERN_LENGTH - 1) // 2
    with pytest.raises(ValueError, match="nests groups too deeply"):
        Searcher("(" * depth + "a" + ")" * depth, timeout=1.0, max_results=1, context=0)


# -- property: refused exactly when the pattern's match is longer than the limit -----------


@dataclass(frozen=True)
class _Node:
    pattern: str
    length: int  # length of the only string the pattern matches


def _literal(text: str) -> _Node:
    return _Node(text, len(text))


def _join(parts: list[_Node]) -> _Node:
    return _Node("".join(p.pattern for p in parts), sum(p.length for p in parts))


def _repeat(node: _Node, count: int) -> _Node:
    return _Node(f"(?:{node.pattern}){{{count}}}", node.length * count)


_nodes = st.recursive(
    st.text("abc", min_size=1, max_size=4).map(_literal),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3).map(_join)
        | st.builds(_repeat, inner, st.integers(1, 300))
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(node=_nodes)
def test_fixed_repeats_are_refused_exactly_when_their_expansion_is_over_the_limit(
    node: _Node,
) -> None:
    if len(node.pattern) > MAX_PATTERN_LENGTH:
        return
    if node.length > MAX_REPEAT_EXPANSION:
        with pytest.raises(ValueError, match="repeats too much"):
            check_pattern_size(node.pattern)
    else:
        check_pattern_size(node.pattern)
