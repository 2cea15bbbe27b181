"""The demo's parts without the embedded model: files, plan, guide, narration, errors."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from contextfold import StructuredOutputError
from contextfold.cli import app
from contextfold.cli._demo_choices import (
    NO_ERROR,
    answer_constraint,
    grep_constraint,
    read_constraint,
    read_file_constraint,
    run_grep_constraint,
)
from contextfold.cli._demo_files import DemoFiles, bundled_data_dir, render_file
from contextfold.cli._demo_guide import FINAL_TOOL, RUN_GREP, Plan, render_answer
from contextfold.cli._demo_model import CacheMeter
from contextfold.cli._demo_run import DemoSettings, run_demo
from contextfold.cli._demo_view import LiveView, PlainView
from contextfold.context import ContextUsage
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.middleware import Middleware
from contextfold.model import ScriptedModel, ScriptedRequest
from contextfold.model._local_kvcache import KVCacheStats

runner = CliRunner()


def _flat(output: str) -> str:
    """The output without rich's error box and line wrapping."""
    return " ".join(output.replace("│", " ").split())


def _folder(tmp_path: Path, n: int = 3, size: int = 4000) -> Path:
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(n):
        lines = [f"file {i} line {k}: error code {k * i} in module m{k}" for k in range(size // 40)]
        (folder / f"f{i}.txt").write_text("\n".join(lines))
    return folder


# -- files -------------------------------------------------------------------------


def test_bundled_runs_are_shipped_with_their_license() -> None:
    folder = bundled_data_dir()
    files = DemoFiles.scan(folder)
    assert len(files.names) == 3
    assert files.recorded_runs
    assert (folder / "LICENSE.md").read_text().startswith("MIT License")


def test_recorded_run_renders_as_a_text_log_with_its_outcome() -> None:
    folder = bundled_data_dir()
    text = render_file(folder / "pydata__xarray-4629.traj.json")
    assert text.startswith("# Recorded agent run pydata__xarray-4629 (38 messages)")
    assert "## message 2: user" in text
    assert "exit_status: Submitted" in text
    assert "diff --git a/xarray/core/merge.py" in text


async def test_read_file_refuses_a_name_outside_the_listing(tmp_path: Path) -> None:
    files = DemoFiles.scan(_folder(tmp_path))
    tool = files.toolkit().get("read_file")
    assert tool is not None
    assert (await tool(path="../secret")).startswith("Error: no file '../secret'")
    assert files.read == []


# -- plan --------------------------------------------------------------------------


def test_plan_reads_files_until_a_compression_then_reads_back(tmp_path: Path) -> None:
    files = DemoFiles.scan(_folder(tmp_path, n=5))
    plan = Plan(files, max_steps=12)
    tools = [plan.step(0).tool, plan.step(1).tool, plan.step(2).tool]
    plan.compressed = True
    tools += [plan.step(i).tool for i in range(3, 7)]
    assert tools == [
        "list_files",
        "read_file",
        "read_file",
        "Read",
        "Grep",
        FINAL_TOOL,
        FINAL_TOOL,
    ]


def test_plan_reads_back_when_no_unread_file_is_named_in_the_context(tmp_path: Path) -> None:
    plan = Plan(DemoFiles.scan(_folder(tmp_path, n=5)), max_steps=12)
    usable = frozenset({"Read", "Grep"})
    assert [plan.step(0).tool, plan.step(1).tool, plan.step(2, usable=usable).tool] == [
        "list_files",
        "read_file",
        "Read",
    ]


def test_plan_passes_over_a_read_back_with_nothing_to_read(tmp_path: Path) -> None:
    plan = Plan(DemoFiles.scan(_folder(tmp_path, n=1)), max_steps=8)
    nothing = frozenset({"list_files"})
    assert [plan.step(i, usable=nothing).tool for i in range(3)] == [
        "list_files",
        FINAL_TOOL,
        FINAL_TOOL,
    ]


def test_plan_leaves_room_for_read_back_and_answer(tmp_path: Path) -> None:
    files = DemoFiles.scan(_folder(tmp_path, n=5))
    plan = Plan(files, max_steps=6)
    assert [plan.step(i).tool for i in range(6)] == [
        "list_files",
        "read_file",
        "read_file",
        "Read",
        "Grep",
        FINAL_TOOL,
    ]


def test_the_shared_finding_is_not_a_heading() -> None:
    messages = [
        _result(
            "x:1:## outcome of proj__a-1: exit_status Submitted; changed pkg/a.py\n"
            "x:2:## outcome of proj__b-2: exit_status Submitted; changed pkg/b.py"
        ),
    ]
    constraint = answer_constraint(messages, ["proj__a-1", "proj__b-2"], recorded=True)
    shared = constraint.schema["properties"]["shared"]
    assert shared == {"enum": ["exit_status Submitted; changed"]}


def test_plan_on_runs_greps_every_log_then_each_runs_log_before_the_answer() -> None:
    files = DemoFiles.scan(bundled_data_dir())
    plan = Plan(files, max_steps=10)
    steps = []
    for i in range(10):
        # One run's search is usable while a log is left to search (three here).
        searched = sum(s.key == RUN_GREP for s in steps)
        usable = frozenset({"read_file", "Grep", *([RUN_GREP] if searched < 3 else [])})
        step = plan.step(i, usable=usable)
        if step.tool == "read_file":
            files.read.append(files.unread()[0])
        steps.append(step)
    assert [s.key or s.tool for s in steps] == [
        "list_files",
        "read_file",
        "read_file",
        "read_file",
        "Grep",
        RUN_GREP,
        RUN_GREP,
        RUN_GREP,
        FINAL_TOOL,
        FINAL_TOOL,
    ]


def test_plan_on_runs_keeps_the_last_step_for_the_answer() -> None:
    files = DemoFiles.scan(bundled_data_dir())
    plan = Plan(files, max_steps=5)
    steps = []
    for i in range(5):
        step = plan.step(i)
        if step.tool == "read_file":
            files.read.append(files.unread()[0])
        steps.append(step.key or step.tool)
    assert steps == ["list_files", "read_file", "Grep", RUN_GREP, FINAL_TOOL]


def test_a_heading_two_logs_hold_is_no_shared_finding() -> None:
    heading = "## message 1: system prompt of the agent"
    messages = [
        _result(f"# Recorded agent run proj__a-1\n{heading}\nexit_status: Submitted"),
        _result(f"# Recorded agent run proj__b-2\n{heading}\nexit_status: Submitted"),
    ]
    constraint = answer_constraint(messages, ["proj__a-1", "proj__b-2"], recorded=True)
    offered = constraint.schema["properties"]["shared"]["enum"]
    assert heading not in offered
    assert "exit_status: Submitted" in offered


def test_plan_refuses_fewer_than_five_steps(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 5 steps"):
        Plan(DemoFiles.scan(_folder(tmp_path)), max_steps=4)


# -- what the model may choose ------------------------------------------------------


def _result(text: str, name: str = "read_file") -> Msg:
    return Msg("user", [ToolResultBlock(id="r", name=name, output=text)], "user")


def test_read_file_offers_only_unread_files_named_in_the_context() -> None:
    text = "a.txt b.txt c.txt"
    constraint = read_file_constraint(["b.txt", "c.txt", "d.txt"], text)
    assert constraint is not None
    assert constraint.schema["properties"]["path"] == {"enum": ["b.txt", "c.txt"]}
    assert constraint.chosen


def test_a_single_allowed_value_is_no_choice() -> None:
    constraint = read_file_constraint(["b.txt"], "b.txt")
    assert constraint is not None
    assert not constraint.chosen
    assert "path: fixed (one value)" in constraint.describe()


def test_nothing_to_read_when_the_context_names_no_unread_file() -> None:
    assert read_file_constraint(["d.txt"], "a.txt b.txt") is None


def test_grep_offers_the_phrases_quoted_in_the_context() -> None:
    text = 'find lines with "outcome of"; or "Error:|FAILED"; not "(unclosed"'
    constraint = grep_constraint(text)
    assert constraint is not None
    props = constraint.schema["properties"]
    assert props["pattern"] == {"enum": ["Error:|FAILED", "outcome of"]}
    assert props["glob"] == {"enum": ["*.txt"]}


def test_grep_in_order_offers_the_next_search_the_task_quoted() -> None:
    text = 'how it ended (Grep "outcome of"), the error (Grep "Error: |^FAILED ")'
    first = grep_constraint(text, searched=[])
    assert first is not None
    assert first.schema["properties"]["pattern"] == {"enum": ["outcome of"]}
    second = grep_constraint(text, searched=[("outcome of", None)])
    assert second is not None
    assert second.schema["properties"]["pattern"] == {"enum": ["Error: |^FAILED"]}


_OUTCOMES = (
    "s/r1.txt:880:## outcome of proj__a-1: exit_status Submitted; the patch changed a.py\n"
    "s/r2.txt:96:## outcome of proj__b-2: exit_status Submitted; the patch changed b.py\n"
    "s/r3.txt:12:## outcome of proj__c-3: exit_status Submitted; the patch changed c.py"
)
_TASK = 'ended (Grep "outcome of"), the error (Grep "Error: |^FAILED ")'


def test_a_runs_search_offers_the_logs_tied_to_a_run_not_searched_yet() -> None:
    runs = ["proj__a-1", "proj__b-2"]  # proj__c-3 was not read: its log is not offered
    searched = [("outcome of", None), ("Error: |^FAILED", "s/r1.txt")]
    constraint = run_grep_constraint(_OUTCOMES, _TASK, runs, searched)
    assert constraint is not None
    props = constraint.schema["properties"]
    assert props["pattern"] == {"enum": ["Error: |^FAILED"]}
    assert props["path"] == {"enum": ["s/r2.txt"]}
    searched.append(("Error: |^FAILED", "s/r2.txt"))
    assert run_grep_constraint(_OUTCOMES, _TASK, runs, searched) is None


def test_a_runs_error_is_one_grep_matched_in_its_own_log() -> None:
    messages = [
        _result(_OUTCOMES, name="Grep"),
        _result("s/r1.txt:698:FAILED tests/test_a.py::test_one", name="Grep"),
        _result("s/r2.txt:428:sqlite3.OperationalError: no such table", name="Grep"),
        _result("a loose line: KeyError: k", name="Grep"),
    ]
    constraint = answer_constraint(messages, ["proj__a-1", "proj__b-2", "proj__c-3"], recorded=True)
    runs = constraint.schema["properties"]["runs"]["properties"]
    assert runs["proj__a-1"]["properties"]["error"] == {
        "enum": ["FAILED tests/test_a.py::test_one"]
    }
    assert runs["proj__b-2"]["properties"]["error"] == {
        "enum": ["sqlite3.OperationalError: no such table"]
    }
    # No error found in its log: the errors no run's log holds, or none seen.
    assert runs["proj__c-3"]["properties"]["error"] == {
        "enum": ["a loose line: KeyError: k", NO_ERROR]
    }


def test_read_offsets_come_from_grep_lines_within_the_item() -> None:
    text = "sessions/s/r1.txt:40:diff --git a/x.py b/x.py\nsessions/s/r1.txt:900:beyond"
    constraint = read_constraint(text, {"sessions/s/r1.txt": 100, "sessions/s/r2.txt": 50})
    assert constraint is not None
    assert constraint.schema["properties"]["path"] == {"const": "sessions/s/r1.txt"}
    assert constraint.schema["properties"]["offset"] == {"enum": [39]}


def test_answer_facts_are_strings_of_the_context() -> None:
    messages = [
        _result("# Recorded agent run proj__a-1\ndiff --git a/pkg/a.py b/pkg/a.py"),
        _result("# Recorded agent run proj__b-2\nValueError: bad input\nexit_status: done"),
        _result("exit_status: done"),
    ]
    constraint = answer_constraint(messages, ["proj__a-1", "proj__b-2", "proj__c-3"], recorded=True)
    assert constraint is not None
    runs = constraint.schema["properties"]["runs"]
    assert runs["required"] == ["proj__a-1", "proj__b-2"]
    fact = runs["properties"]["proj__a-1"]["properties"]
    assert fact["files_changed"]["items"] == {"enum": ["pkg/a.py"]}
    assert fact["error"] == {"enum": ["ValueError: bad input", NO_ERROR]}


def test_a_runs_files_are_the_paths_on_the_context_lines_that_name_it() -> None:
    messages = [
        _result(
            "x:1:## outcome of proj__a-1: changed pkg/a.py\nx:2:## outcome of proj__b-2: "
            "changed pkg/b.py"
        ),
    ]
    constraint = answer_constraint(messages, ["proj__a-1", "proj__b-2"], recorded=True)
    runs = constraint.schema["properties"]["runs"]["properties"]
    # One path on the line naming the run, so no choice.
    assert runs["proj__a-1"]["properties"]["files_changed"]["items"] == {"enum": ["pkg/a.py"]}


def test_lines_a_grammar_literal_cannot_hold_are_not_offered() -> None:
    call = ToolCallBlock(id="c1", name="read_file", input={"path": "sub"})
    text = 'x = "quoted"\nok: a plain line here\ntab\there too long enough'
    messages = [
        Msg("assistant", [call], "assistant"),
        Msg("user", [ToolResultBlock(id="c1", name="read_file", output=text)], "user"),
    ]
    constraint = answer_constraint(messages, ["sub"], recorded=False)
    found = constraint.schema["properties"]["files"]["properties"]["sub"]["properties"]["found"]
    assert found == {"enum": ["ok: a plain line here"]}


def test_a_files_lines_are_those_its_read_returned() -> None:
    call = ToolCallBlock(id="c1", name="read_file", input={"path": "a.py"})
    messages = [
        Msg("assistant", [call], "assistant"),
        Msg(
            "user", [ToolResultBlock(id="c1", name="read_file", output="def alpha(): pass")], "user"
        ),
        _result("def beta(): return 2"),
    ]
    constraint = answer_constraint(messages, ["a.py", "b.py"], recorded=False)
    files = constraint.schema["properties"]["files"]["properties"]
    assert files["a.py"]["properties"]["found"] == {"enum": ["def alpha(): pass"]}
    assert "b.py" not in files  # not named in the context


def test_answer_renders_one_line_per_run_and_the_shared_line() -> None:
    answer = {
        "runs": {"proj__a-1": {"files_changed": ["pkg/a.py"], "error": "ValueError: x"}},
        "shared": "exit_status: done",
    }
    assert render_answer(answer) == (
        "- proj__a-1: changed pkg/a.py; met: ValueError: x\nShared: exit_status: done"
    )


# -- a whole run with scripted models -------------------------------------------------


def _bad_script(request: ScriptedRequest) -> Any:
    """Arguments no grammar would allow: they must reach the tools as written."""
    choice = request.tool_choice
    if choice == "read_file":
        return {"path": "not-a-file.txt"}
    return _agent_script(request)


def _agent_script(request: ScriptedRequest) -> Any:
    choice = request.tool_choice
    if choice == "read_file":
        done = sum(r.name == "read_file" for m in request.messages for r in m.tool_results)
        return {"path": f"f{min(done, 2)}.txt"}
    if choice == "Grep":
        return {"pattern": "error code 1"}
    if choice == "Read":
        return {"path": "bogus"}
    if choice == FINAL_TOOL:
        return {"files": {"f0.txt": {"found": "error code"}}, "shared": "error codes"}
    return {}


def _run_calls(path: Path) -> list[dict[str, Any]]:
    """The tool calls the model answered with, as recorded in requests.jsonl."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        block["input"]
        for row in rows
        for block in row["response"]["content"]
        if block.get("type") == "tool_call"
    ]


async def test_scripted_run_runs_the_models_arguments_unchanged(tmp_path: Path) -> None:
    executed: list[dict[str, Any]] = []

    class Spy(Middleware):
        async def on_tool_call(self, ctx: Any, call_next: Any) -> Any:
            executed.append(dict(ctx.call.input))
            return await call_next(ctx)

    model = ScriptedModel(_bad_script, context_size=2048)
    summarizer = ScriptedModel(lambda request: StructuredOutputError("no summary today"))
    settings = DemoSettings(
        folder=_folder(tmp_path),
        workdir=tmp_path / "work",
        context_size=2048,
        tool_result_limit=200,
        max_steps=8,
        guided=True,
    )
    out = io.StringIO()
    result = await run_demo(
        settings, model, summarizer, PlainView(Console(file=out, width=200)), middleware=[Spy()]
    )
    assert {"path": "not-a-file.txt"} in executed
    assert {"pattern": "error code 1"} in executed
    assert executed == _run_calls(result.workdir / "requests.jsonl")[: len(executed)]
    assert "guide:" not in out.getvalue()


async def test_scripted_run_truncates_compresses_by_fallback_and_reports_who_chose(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(_agent_script, context_size=2048)
    summarizer = ScriptedModel(lambda request: StructuredOutputError("no summary today"))
    out = io.StringIO()
    settings = DemoSettings(
        folder=_folder(tmp_path, n=5),
        workdir=tmp_path / "work",
        context_size=2048,
        tool_result_limit=200,
        max_steps=8,
        guided=True,
    )
    result = await run_demo(settings, model, summarizer, PlainView(Console(file=out, width=200)))
    text = out.getvalue()
    assert result.reply == "- f0.txt: found: error code\nShared: error codes"
    assert result.truncations >= 1
    assert [c.method for c in result.compressions][:1] == ["truncation"]
    assert "FALLBACK: the summary failed" in text
    assert result.records[0].tool == "list_files"
    assert not result.records[0].chosen
    assert "step 1  · forced by the plan: plan forced list_files" in text
    assert any(r.chosen for r in result.records)
    assert {i.kind for i in result.items} >= {"tool_result", "context"}


def _has_usage_hint(request: ScriptedRequest) -> bool:
    return any(m.metadata.get("contextfold") == "usage_hint" for m in request.messages)


async def test_final_answer_request_leaves_the_usage_note_out(tmp_path: Path) -> None:
    requests: list[ScriptedRequest] = []

    def script(request: ScriptedRequest) -> Any:
        requests.append(request)
        return _agent_script(request)

    model = ScriptedModel(script, context_size=2048)
    summarizer = ScriptedModel(lambda request: StructuredOutputError("no summary today"))
    out = io.StringIO()
    settings = DemoSettings(
        folder=_folder(tmp_path),
        workdir=tmp_path / "work",
        context_size=2048,
        tool_result_limit=450,  # so the last step is past the hint mark (73%)
        max_steps=5,
        guided=True,
    )
    await run_demo(settings, model, summarizer, PlainView(Console(file=out, width=200)))
    final = requests[-1]
    assert final.tool_choice == FINAL_TOOL
    assert not _has_usage_hint(final)
    # Printed only when the note was the request's last message and was taken out.
    # (the step number follows the plan: the final answer's step)
    assert re.search(r"step \d+  · usage note left out", out.getvalue())


# -- the command line ----------------------------------------------------------------


def test_every_command_is_registered() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "replay", "inspect"):
        assert command in _flat(result.output)


def test_unknown_model_provider_exits_2_naming_the_choices() -> None:
    result = runner.invoke(app, ["demo", "--model", "gemini:pro"])
    assert result.exit_code == 2
    assert "unknown model provider 'gemini'" in _flat(result.output)


def test_missing_api_key_exits_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["demo", "--model", "openai:gpt-4o-mini"])
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in _flat(result.output)


def test_missing_local_extra_exits_2_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cyllama", None)
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 2
    assert "contextfold[local]" in _flat(result.output)


def test_base_url_with_the_embedded_model_exits_2() -> None:
    result = runner.invoke(app, ["demo", "--base-url", "http://localhost:1/v1"])
    assert result.exit_code == 2
    assert "takes no --base-url" in _flat(result.output)


def test_missing_folder_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--path", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such directory" in _flat(result.output)


def test_too_few_steps_exit_2() -> None:
    result = runner.invoke(app, ["demo", "--max-steps", "3"])
    assert result.exit_code == 2
    assert "--max-steps" in _flat(result.output)


# -- what is shown --------------------------------------------------------------------


def _usage() -> ContextUsage:
    return ContextUsage(
        system=700, summary=300, context=900, tools=120, overhead=3, context_size=2560
    )


def test_cache_meter_counts_cached_tokens_and_time_saved() -> None:
    stats = KVCacheStats(
        completions=2, prompt_tokens=2200, cache_read_tokens=1000, prompt_eval_seconds=6.0
    )
    meter = CacheMeter.of(stats)
    assert (meter.prompt_tokens, meter.cached, meter.completions) == (2200, 1000, 2)
    assert meter.evaluated == 1200
    assert meter.seconds_saved == pytest.approx(1000 * 6.0 / 1200)


def test_plain_view_prints_the_three_layers_on_one_line() -> None:
    out = io.StringIO()
    PlainView(Console(file=out, width=300)).usage(3, _usage())
    assert out.getvalue().strip() == (
        "step 3 input: system prompt+tools 823 · summary 300 · context 900 = "
        "2,023 of 2,560 tokens (79%)"
    )


def test_live_view_draws_a_bar_per_layer_and_the_trigger() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140)
    view = LiveView(console, trigger_ratio=0.75, model_name="m")
    view.usage(4, _usage())
    view.status("step 4: thinking")
    console.print(view._render())
    text = out.getvalue()
    for label in ("system prompt + tools", "summary", "context", "window 2,560"):
        assert label in text
    assert "compression trigger at 75% (1,920 tokens)" in text
    assert "step 4: thinking" in text


async def test_scripted_run_in_the_background_shows_when_each_summary_was_prepared(
    tmp_path: Path,
) -> None:
    async def summarize(request: ScriptedRequest) -> Any:
        await asyncio.sleep(0.2)
        return {
            "task_overview": "Read the files and report their errors.",
            "current_state": "Files read.",
            "important_discoveries": "error code 1",
            "next_steps": "Answer.",
            "context_to_preserve": "f0.txt",
        }

    async def agent_step(request: ScriptedRequest) -> Any:
        # A step takes time, as a model's does: the summary is ready a few steps on. (With
        # instant steps the agent only stops for it at the wait mark, past this run's end.)
        await asyncio.sleep(0.1)
        return _agent_script(request)

    model = ScriptedModel(agent_step, context_size=2048)
    out = io.StringIO()
    settings = DemoSettings(
        folder=_folder(tmp_path, n=5),
        workdir=tmp_path / "work",
        context_size=2048,
        tool_result_limit=200,
        max_steps=8,
        guided=True,
        background=True,
        background_start=0.3,
    )
    result = await run_demo(
        settings, model, ScriptedModel(summarize), PlainView(Console(file=out, width=200))
    )
    text = out.getvalue()
    phases = [e.phase for e in result.background]
    assert phases[:3] == ["started", "ready", "applied"]
    assert "background summary started on a snapshot" in text
    assert "applied at the trigger" in text
    assert "summary prepared in the background, swapped in" in text
    # One wait per compression: what was left of a prepared one, or the whole of another.
    assert len(result.waits) == len(result.compressions)
    applied = next(e for e in result.background if e.phase == "applied")
    assert applied.waited_s in result.waits
