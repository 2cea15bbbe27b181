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
