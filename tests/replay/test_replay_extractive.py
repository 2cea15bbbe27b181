"""ExtractiveSummarizer: the forced summary call, answered by extraction."""

from __future__ import annotations

from pathlib import Path

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.context import (
    ContextConfig,
    ExtractiveSummarizer,
    SummaryRequest,
    extractive_summary,
    summarize_items,
)
from contextfold.context._extractive import _FIELD_CHARS, SUMMARY_FIELDS
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.replay import load_trajectory

CONFIG = ContextConfig()


async def _summarize(
    msgs: list[Msg], previous: Msg | None = None, schema: dict[str, object] | None = None
) -> dict[str, object]:
    request = SummaryRequest(
        messages=msgs,
        previous=previous,
        instructions="",
        hints=(),
        schema=CONFIG.summary_schema if schema is None else schema,
    )
    return (await ExtractiveSummarizer().summarize(request)).fields


def _exchange(command: str, output: str, *, n: int, error: bool = False) -> list[Msg]:
    call = ToolCallBlock(id=f"c{n}", name="bash", input={"command": command})
    result = ToolResultBlock(id=f"c{n}", name="bash", output=output, is_error=error)
    return [
        Msg("assistant", [call], "assistant"),
        Msg("user", [result], "user"),
    ]


async def test_summary_of_a_recorded_run_validates_against_the_default_schema(
    swe_files: list[Path],
) -> None:
    run = load_trajectory(swe_files[0])
    fields = await _summarize(run.messages[:30])
    jsonschema.validate(fields, CONFIG.summary_schema)
    assert set(fields) == set(SUMMARY_FIELDS)


async def test_summary_is_deterministic(swe_files: list[Path]) -> None:
    msgs = load_trajectory(swe_files[1]).messages[:25]
    assert await _summarize(msgs) == await _summarize(msgs)


async def test_task_overview_is_the_first_user_request() -> None:
    msgs = [
        Msg("user", "Fix the off-by-one in pagination of /api/items.", "user"),
        *_exchange("ls src", "api.py\nviews.py", n=1),
    ]
    fields = await _summarize(msgs)
    assert fields["task_overview"] == "Fix the off-by-one in pagination of /api/items."


async def test_task_overview_is_carried_over_from_the_previous_summary_text() -> None:
    previous = Msg(
        "summary",
        "<system-reminder>Summary.\n# Task overview\nMigrate the database to v2.\n\n"
        "# Current state\nhalf done</system-reminder>",
        "user",
    )
    fields = await _summarize(_exchange("ls", "a.sql", n=1), previous=previous)
    assert fields["task_overview"] == "Migrate the database to v2."


async def test_task_overview_is_carried_over_from_the_previous_summary_fields() -> None:
    previous = Msg(
        "summary",
        "rendered by a custom template without headings",
        "user",
        metadata={"fields": {"task_overview": "Port the CLI to typer."}},
    )
    fields = await _summarize(_exchange("ls", "a.sql", n=1), previous=previous)
    assert fields["task_overview"] == "Port the CLI to typer."


async def test_errors_come_from_tool_output_not_from_code_the_assistant_wrote() -> None:
    msgs = [
        Msg("user", "Make the tests pass.", "user"),
        *_exchange(
            "cat > check.py <<'EOF'\nraise ValueError('never run')\nEOF",
            "",
            n=1,
        ),
        *_exchange(
            "pytest tests/test_db.py",
            "Traceback (most recent call last):\nKeyError: 'user_id'\nFAILED tests/test_db.py",
            n=2,
            error=True,
        ),
    ]
    fields = await _summarize(msgs)
    discoveries = str(fields["important_discoveries"])
    assert "KeyError: 'user_id'" in discoveries
    assert "FAILED tests/test_db.py" in discoveries
    assert "never run" not in discoveries
    assert "tests/test_db.py" in discoveries  # file paths


async def test_current_state_lists_the_last_commands_decoded() -> None:
    msgs = [Msg("user", "go", "user")]
    for n in range(10):
        msgs += _exchange(f"echo step{n}", f"step{n}", n=n)
    state = str((await _summarize(msgs))["current_state"])
    assert "- bash: echo step9" in state
    assert "echo step0" not in state  # only the last few actions
    assert "10 tool call(s) (0 failed)" in state


async def test_next_steps_is_the_last_assistant_thought() -> None:
    msgs = [
        Msg("user", "go", "user"),
        Msg("assistant", "THOUGHT: next I will patch utils.py", "assistant"),
    ]
    assert "next I will patch utils.py" in str((await _summarize(msgs))["next_steps"])


async def test_identifiers_are_preserved() -> None:
    msgs = [
        Msg("user", "Cancel reservation ZFA04Y for user mia_li_3668.", "user"),
        *_exchange("lookup", "SlicedLowLevelWCS world_to_pixel", n=1),
    ]
    preserve = str((await _summarize(msgs))["context_to_preserve"])
    for name in ("ZFA04Y", "mia_li_3668", "SlicedLowLevelWCS", "world_to_pixel"):
        assert name in preserve


async def test_custom_schema_properties_receive_the_rendered_summary() -> None:
    schema = {
        "type": "object",
        "properties": {"task_overview": {"type": "string"}, "notes": {"type": "string"}},
        "required": ["task_overview", "notes"],
    }
    out = await _summarize([Msg("user", "hello there", "user")], schema=schema)
    assert out["task_overview"] == "hello there"
    assert "task_overview: hello there" in out["notes"]


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=3000), st.integers(min_value=1, max_value=40))
def test_fields_are_bounded_and_valid_for_any_messages(text: str, repeat: int) -> None:
    msgs = [Msg("user", text * repeat, "user"), Msg("assistant", text, "assistant")]
    fields = extractive_summary(msgs, previous=text)
    jsonschema.validate(fields, CONFIG.summary_schema)
    for name, value in fields.items():
        assert len(value) <= _FIELD_CHARS[name]


def test_summarize_items_reads_role_text_pairs_and_a_previous_summary() -> None:
    items = [
        ("system", "You are an agent."),
        ("user", "<system-info>S\n# Task overview\nPort the CLI to typer.\n\n# Current state\nx"),
        ("assistant", "THOUGHT: edit src/cli/main.py next"),
        ("user", "ModuleNotFoundError: No module named 'click_default_group'"),
        ("user", "<system-hint>Summarize now.</system-hint>"),
    ]
    fields = summarize_items(items)
    jsonschema.validate(fields, CONFIG.summary_schema)
    assert fields["task_overview"] == "Port the CLI to typer."
    assert "ModuleNotFoundError" in fields["important_discoveries"]
    assert "src/cli/main.py" in fields["important_discoveries"]
    assert "edit src/cli/main.py next" in fields["next_steps"]


async def test_line_numbers_and_counts_are_not_listed_as_discoveries() -> None:
    # "Numbers: 640, 641, 642, ..." (the line numbers of an ``nl -ba`` listing) took
    # about 100 tokens of every summary of the long runs, from the commands' room, and
    # no later step used them (issue 26, point 6).
    listing = "\n".join(f"   {n}\t    value = compute({n})" for n in range(640, 700))
    msgs = _exchange("nl -ba src/pkg/mod.py | sed -n '640,699p'", listing, n=1)
    fields = await _summarize(msgs)
    discoveries = str(fields["important_discoveries"])
    assert "src/pkg/mod.py" in discoveries
    assert "Numbers:" not in discoveries
    assert "641" not in discoveries
