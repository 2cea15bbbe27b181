"""The benchmark harness's shared summarizer input and data loader (no AgentScope needed).

Both systems are summarized by the library's ``summarize_items``; what the harness adds is
turning our engine's ``SummaryRequest`` into the neutral ``(role, text)`` items that
AgentScope's messages flatten to.
"""

from __future__ import annotations

from benchmarks import _contextfold as driver
from benchmarks import _data as data
from contextfold.context import ContextConfig, SummaryRequest, summarize_items
from contextfold.context._summary import render_summary
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock

ITEMS = [
    ("system", "You are an agent."),
    ("user", "Fix the crash in src/app/main.py when the config is empty."),
    ("assistant", "THOUGHT: look at the file"),
    ("assistant", "cat src/app/main.py"),
    (
        "tool",
        'Traceback (most recent call last):\n  File "src/app/main.py", line 120, in load_config\n'
        "KeyError: 'timeout'",
    ),
    ("assistant", "THOUGHT: the key is missing; patch parse_header() next."),
]

MSGS = [
    Msg("user", "Fix the crash in src/app/main.py when the config is empty.", "user"),
    Msg(
        "agent",
        [
            TextBlock(text="THOUGHT: look at the file"),
            ToolCallBlock(id="c1", name="bash", input={"command": "cat src/app/main.py"}),
        ],
        "assistant",
    ),
    Msg(
        "user",
        [ToolResultBlock(id="c1", name="bash", output="KeyError: 'timeout'", is_error=True)],
        "user",
    ),
]


def _request(msgs: list[Msg], previous: str | None = None) -> SummaryRequest:
    return SummaryRequest(
        messages=msgs,
        previous=None if previous is None else Msg("summary", previous, "user"),
        instructions="Summarize.",
        hints=(),
        schema=ContextConfig().summary_schema,
    )


def test_summary_keeps_paths_errors_and_functions() -> None:
    text = "\n".join(summarize_items(ITEMS).values())
    assert "src/app/main.py" in text
    assert "KeyError: 'timeout'" in text
    assert "load_config" in text
    assert "parse_header" in text


def test_tool_items_are_read_as_tool_results() -> None:
    fields = summarize_items(ITEMS)
    assert "1 tool call(s)" not in fields["current_state"]
    assert "KeyError: 'timeout'" in fields["important_discoveries"]


def test_task_overview_is_the_first_user_request() -> None:
    assert summarize_items(ITEMS)["task_overview"].startswith("Fix the crash")


def test_previous_summary_task_is_carried_over_in_either_heading_case() -> None:
    for heading in ("# Task overview", "# Task Overview"):
        previous = (
            f"<system-info>Summary\n{heading}\nShip version 2 of the parser.\n\n"
            "# Current state\nnothing</system-info>"
        )
        fields = summarize_items([("user", previous), ("assistant", "ok")])
        assert fields["task_overview"] == "Ship version 2 of the parser."


def test_our_summary_request_gives_the_flattened_messages() -> None:
    previous, span = driver.summary_request_items(_request(MSGS))
    assert previous == []
    assert span == driver.flatten(MSGS)


def test_our_previous_summary_is_recognised_by_the_shared_summarizer() -> None:
    fields = {"task_overview": "Ship version 2 of the parser.", "current_state": "x"}
    rendered = render_summary(ContextConfig().summary_template, fields)
    previous, span = driver.summary_request_items(_request(MSGS, previous=rendered))
    assert summarize_items(previous + span)["task_overview"] == "Ship version 2 of the parser."


def test_swebench_sessions_load_with_their_steps() -> None:
    sessions = data.load_swebench()
    assert len(sessions) == 44
    assert all(s.steps and s.task for s in sessions)


def test_synthetic_session_has_the_requested_size() -> None:
    assert data.synthetic_session(1000).n_messages == 1000
