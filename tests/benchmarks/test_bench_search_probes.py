"""The search figure's probe rules (``benchmarks/fig_search.py``), on a few made-up items."""

from __future__ import annotations

from benchmarks.fig_search import build_probes

ITEMS = [
    (
        "sessions/a/context.jsonl",
        0,
        "context",
        "Running the parser suite now\n"
        "E   ValueError: unexpected token in header\n"
        "collected tests from tests/test_lexer.py quickly",
    ),
    ("sessions/a/context.jsonl", 1, "context", "ok\nfine"),  # no fact: no probe
    (
        "sessions/b/tool_result-c1.txt",
        0,
        "tool_result",
        "checking configuration values\nsee src/app/models.py for the Manager class\nend",
    ),
    (  # its error line gives the same query as above: skipped for its next fact
        "sessions/c/context.jsonl",
        4,
        "context",
        "Running the parser suite now\n"
        "E   TypeError: unexpected token in header\n"
        "collected tests from tests/test_lexer.py quickly",
    ),
]


def test_one_probe_per_item_from_the_first_fact_line_with_a_query() -> None:
    probes = build_probes(ITEMS)
    assert [(p.path, p.line, p.kind, p.fact) for p in probes] == [
        ("sessions/a/context.jsonl", 0, "error", "ValueError"),
        ("sessions/b/tool_result-c1.txt", 0, "path", "src/app/models.py"),
        ("sessions/c/context.jsonl", 4, "path", "tests/test_lexer.py"),
    ]


def test_the_query_is_the_longest_words_of_the_adjacent_lines_without_the_fact() -> None:
    first, second, third = build_probes(ITEMS)
    assert first.query == "test_lexer collected Running quickly parser suite"  # 6 longest
    assert second.query == "configuration checking values end"
    assert "models" not in second.query.lower()  # shares a term with the fact
    assert third.query == "unexpected TypeError header token"  # "test" parts are the fact's
    assert first.passage == ITEMS[0][3]
