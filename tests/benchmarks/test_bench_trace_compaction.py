"""The compaction trace (issue 25): a second automatic compaction is traced in both modes."""

from __future__ import annotations

from benchmarks.trace_compaction import table, trace_compaction


async def test_the_second_compaction_is_traced_in_both_modes() -> None:
    rows = []
    for mode in ("append", "rewrite"):
        trace, figures = await trace_compaction(mode)
        assert figures.summarizer_calls >= 1  # a summary was written: a compaction ran
        assert figures.context_functions > 0
        assert figures.all_functions >= figures.context_functions
        assert figures.context_modules > 1
        assert figures.hops >= figures.context_hops > 0
        assert "ContextEngine.prepare" in {name for _, name in trace.functions("context")}
        rows.append(figures)
    append, rewrite = rows
    assert append.appended  # the second compaction added a part to the first summary
    assert not rewrite.appended
    assert table(rows).splitlines()[0] == "| one automatic compaction | `append` | `rewrite` |"
