"""Grep shows exactly the context lines asked for (``workspace/_grep.py``)."""

from __future__ import annotations

import pytest

from contextfold.workspace._grep import Searcher


@pytest.mark.parametrize("context", [0, 1, 2])
def test_a_match_carries_exactly_the_context_asked_for(context: int) -> None:
    searcher = Searcher("^b$", timeout=5.0, max_results=10, context=context)
    searcher.search("item", ["a0\na1\nb\nc0\nc1\nc2"])
    (match,) = searcher.matches
    assert match.before == ("a0", "a1")[2 - context :]
    assert match.after == ("c0", "c1")[:context]
