"""Where the LangChain comparison finds the summary layer of a request it recorded."""

from __future__ import annotations

from benchmarks.langchain_compare import sent_requests

SYSTEM = {"role": "system", "content": "be brief"}


def test_no_summary_before_the_first_compression() -> None:
    wire = [[SYSTEM, {"role": "user", "content": "task: fix src/a.py"}]]
    (sent,) = sent_requests(wire, compressions_at=[])
    assert sent.summary == ""
    assert "task: fix src/a.py" in sent.rest
    assert sent.step == 0
    assert sent.kept_steps == 0


def test_after_a_compression_the_leading_user_messages_are_the_summary() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls src"}'},
    }
    before = [
        SYSTEM,
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    after = [
        SYSTEM,
        {"role": "user", "content": "summary: edited src/a.py"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "user", "content": "a later note"},
    ]
    first, second = sent_requests([before, after], compressions_at=[1])
    assert first.summary == ""
    assert first.kept_steps == 1
    assert second.summary == "summary: edited src/a.py"
    assert "ls src" in second.rest
    assert "a later note" in second.rest
    assert "be brief" in second.rest
    assert second.step == 1
    assert second.kept_steps == 1


def test_the_whole_run_grader_separates_dropping_the_oldest_from_contextfold() -> None:
    """On the first two runs, in one real ``create_agent`` loop each: dropping the oldest
    messages keeps about a tenth of the compressed commands over the rest of the run, the
    contextfold middleware about two thirds; neither sends an orphaned tool message."""
    import argparse
    import asyncio
    from pathlib import Path

    from benchmarks.langchain_compare import main_async, whole_run

    args = argparse.Namespace(
        runs=2,
        base_url=None,
        summarizer="extractive",
        context_size=16_000,
        systems="drop-oldest,contextfold",
    )
    results = asyncio.run(main_async(args, Path("unused.log")))
    assert all(r["orphaned_tool_messages"] == 0 for r in results)
    trivial = whole_run(results, "drop-oldest").kept_rate("commands")
    ours = whole_run(results, "contextfold").kept_rate("commands")
    assert trivial is not None
    assert ours is not None
    assert ours - trivial >= 0.3
