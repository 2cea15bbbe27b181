"""The code-aware search terms every backend indexes and queries with."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.workspace._terms import _terms, index_terms, query_terms


def test_words_are_indexed_whole_and_in_their_parts() -> None:
    assert index_terms("see src/parser/lexer.py") == [
        "see",
        "srcparserlexerpy",
        "src",
        "parser",
        "lexer",
        "py",
    ]
    assert index_terms("parse_args getUserName") == [
        "parseargs",
        "parse",
        "args",
        "getusername",
        "get",
        "user",
        "name",
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ9_./\\:- \n\té"), max_size=80))
def test_a_document_is_indexed_under_the_terms_a_query_of_it_has(text: str) -> None:
    terms = index_terms(text)
    assert terms == list(_terms(text))
    if terms:
        assert query_terms(text[:1000]) == list(dict.fromkeys(terms))[:32]
