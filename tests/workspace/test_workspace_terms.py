"""The code-aware search terms every backend indexes and queries with."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.workspace._terms import (
    MAX_DOC_CHARS,
    TERMS_VERSION,
    _terms,
    index_terms,
    query_terms,
)


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


_SAMPLE = (
    "See src/parser/lexer.py: Foo.parse_args(getUserName) raised ValueError at line 1234; "
    "HTTPServer_v2 and the résumé of naïve_Ünïcode, x a_b C++ ../up\\win:drive-x "
    + "a" * 70
    + " 3.14e10 __init__ IOError's"
)


def test_a_change_of_the_terms_comes_with_a_new_terms_version() -> None:
    # The SQLite index recomputes a document's terms to delete it: terms that changed
    # under an index written with the old ones would corrupt it. A new TERMS_VERSION
    # makes every index be built again; update the digest with it.
    digest = hashlib.sha256(" ".join(index_terms(_SAMPLE)).encode()).hexdigest()[:16]
    assert (TERMS_VERSION, MAX_DOC_CHARS, digest) == (1, 2_000_000, "2e3d3431f4a1fe4e")
