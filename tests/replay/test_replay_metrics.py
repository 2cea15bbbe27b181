"""replay_run / replay_runs on recorded runs: the metrics and their definitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.context import ContextConfig, ExtractiveSummarizer
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock, msgs_to_jsonl
from contextfold.model import ScriptedModel
from contextfold.replay import (
    ReplayTotals,
    RunResult,
    Trajectory,
    find_recordings,
    load_openai_runs,
    load_recordings,
    load_trajectory,
    replay_run,
    replay_runs,
    tools_of,
)
from contextfold.token import OpenAITokenCounter
from contextfold.workspace import MemoryWorkspace

COUNTER = OpenAITokenCounter("o200k_base")


def _assert_sane(run: RunResult, window: int) -> None:
    assert run.error is None
    assert run.steps
    assert run.peak_tokens <= window
    for step in run.steps:
        assert step.total == step.system + step.tools + step.overhead + step.summary + step.context
        assert 0 <= step.shared_prefix <= step.total
    stability = run.prefix_stability
    assert stability is not None
    assert 0.0 <= stability <= 1.0


async def test_swebench_runs_stay_in_a_small_window_and_compress(swe_files: list[Path]) -> None:
    runs = [(load_trajectory(p), str(p)) for p in swe_files]
    result = await replay_runs(runs, context_size=8000)
    for run in result.runs:
        _assert_sane(run, 8000)
        assert run.compressions > 0
        assert run.tokens_saved > 0
        assert run.tokens_offloaded > 0
        assert run.raw_peak_tokens > 8000
    assert result.totals.compressions == sum(r.compressions for r in result.runs)


async def test_one_step_per_recorded_assistant_turn(swe_files: list[Path]) -> None:
    run = load_trajectory(swe_files[0])
    result = await replay_run(run, context_size=8000)
    turns = [i for i, m in enumerate(run.messages) if m.role == "assistant"]
    assert [s.message_index for s in result.steps] == turns


async def test_tau_bench_runs_replay_with_sane_metrics(tau_file: Path) -> None:
    runs = [(r, str(tau_file)) for r in load_openai_runs(tau_file)[:12]]
    result = await replay_runs(runs, context_size=3500)
    for run in result.runs:
        _assert_sane(run, 3500)
    assert result.totals.compressions > 0
    assert result.totals.runs == 12


def _toy_run(n: int = 6, output: str = "ok") -> Trajectory:
    msgs: list[Msg] = [Msg("user", "Please list the files, one command per step.", "user")]
    for i in range(n):
        call = ToolCallBlock(id=f"c{i}", name="bash", input={"command": f"ls dir{i}"})
        msgs.append(Msg("assistant", [call], "assistant"))
        result = ToolResultBlock(id=f"c{i}", name="bash", output=f"{output} {i}")
        msgs.append(Msg("user", [result], "user"))
    return Trajectory(instance_id="toy", system="You are terse.", messages=msgs, format="test")


async def test_raw_is_the_uncompressed_request_at_each_step() -> None:
    run = _toy_run()
    result = await replay_run(run, context_size=100_000, counter=COUNTER)
    tools = tools_of(run)
    system = Msg("system", "You are terse.", "system")
    for step in result.steps:
        history = [system, *run.messages[: step.message_index]]
        assert step.raw == COUNTER.count_request(history, tools)
        assert step.total == step.raw  # nothing to compress in a big window
    assert result.tokens_saved == 0


async def test_prefix_stability_of_an_append_only_history_is_the_previous_request() -> None:
    result = await replay_run(_toy_run(), context_size=100_000, counter=COUNTER)
    for before, step in zip(result.steps, result.steps[1:], strict=False):
        # Everything of the previous request but its reply priming is shared.
        assert step.shared_prefix == before.total - before.overhead
        assert step.shared_prefix == step.raw_shared_prefix
    assert result.steps[0].shared_prefix == 0
    shared = sum(s.shared_prefix for s in result.steps[1:])
    totals = sum(s.total for s in result.steps[1:])
    assert result.prefix_stability == pytest.approx(shared / totals)


async def test_a_compression_breaks_the_prefix_after_system_and_tools(
    swe_files: list[Path],
) -> None:
    result = await replay_run(load_trajectory(swe_files[0]), context_size=8000)
    compressed = [s for s in result.steps[1:] if s.compressions]
    assert compressed
    for step in compressed:
        assert step.shared_prefix == step.system + step.tools


async def test_tokens_offloaded_count_what_the_workspace_holds(swe_files: list[Path]) -> None:
    workspace = MemoryWorkspace()
    await workspace.initialize()
    run = load_trajectory(swe_files[0])
    result = await replay_run(
        run,
        context_size=8000,
        config=ContextConfig(tool_result_limit=300),
        workspace=workspace,
        counter=COUNTER,
    )
    assert result.truncations > 0
    stored = await workspace.load_context(run.instance_id)
    expected = sum(COUNTER.count_message(m) for m in stored)
    items = await workspace.list_items(run.instance_id)
    for info in items:
        if info.kind == "tool_result":
            expected += COUNTER.count_text((await workspace.read_bytes(info.ref)).decode())
    assert result.tokens_offloaded == expected
    assert result.items_offloaded == len(stored) + sum(i.kind == "tool_result" for i in items)


async def test_runs_sharing_a_workspace_get_distinct_sessions() -> None:
    workspace = MemoryWorkspace()
    await workspace.initialize()
    run = _toy_run(n=30, output="x" * 400)
    await replay_runs([(run, "a"), (run, "b")], context_size=1500, workspace=workspace)
    assert await workspace.list_sessions() == ["toy", "toy-2"]


async def test_a_failing_run_is_reported_and_keeps_its_steps() -> None:
    failing = ScriptedModel([RuntimeError("summarizer down")] * 50)
    result = await replay_run(
        _toy_run(n=30, output="x" * 400),
        context_size=1500,
        config=ContextConfig(compression_fallback_to_truncation=False, summary_attempts=1),
        summarizer=failing,
    )
    assert result.error is not None
    assert result.error.startswith("CompressionError")
    assert result.steps  # the steps before the failure


async def test_msg_jsonl_replays_like_the_original(swe_files: list[Path], tmp_path: Path) -> None:
    run = load_trajectory(swe_files[0])
    path = tmp_path / "run.jsonl"
    path.write_text(msgs_to_jsonl(run.all_messages()), encoding="utf-8")
    ((copy, _source),) = load_recordings([path]).runs
    # Same session id: the offload reference appears in the summary.
    original = await replay_run(run, context_size=8000, session_id="s")
    replayed = await replay_run(copy, context_size=8000, session_id="s")
    assert [s.total for s in replayed.steps] == [s.total for s in original.steps]
    assert replayed.compressions == original.compressions


def test_directories_are_searched_recursively_and_other_json_is_skipped(
    tmp_path: Path, swe_files: list[Path]
) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "run.traj.json").write_bytes(swe_files[0].read_bytes())
    (tmp_path / "config.json").write_text('{"not": "a run"}')
    (tmp_path / "notes.txt").write_text("ignored")
    assert find_recordings([tmp_path]) == [
        tmp_path / "a" / "b" / "run.traj.json",
        tmp_path / "config.json",
    ]
    loaded = load_recordings([tmp_path])
    assert len(loaded.runs) == 1
    assert [f for f, _ in loaded.skipped] == [tmp_path / "config.json"]


def test_totals_weight_stability_by_tokens() -> None:
    from contextfold.replay import StepUsage

    def step(i: int, total: int, shared: int) -> StepUsage:
        return StepUsage(
            step=i,
            message_index=i,
            system=0,
            tools=0,
            overhead=0,
            summary=0,
            context=total,
            total=total,
            raw=total,
            shared_prefix=shared,
            raw_shared_prefix=shared,
        )

    a = RunResult(
        run_id="a", source="", format="", context_size=10, steps=[step(0, 100, 0), step(1, 100, 50)]
    )
    b = RunResult(
        run_id="b", source="", format="", context_size=10, steps=[step(0, 10, 0), step(1, 300, 300)]
    )
    totals = ReplayTotals.of([a, b])
    assert a.prefix_stability == 0.5
    assert totals.prefix_stability == pytest.approx(350 / 400)
    assert totals.steps == 4
    assert totals.peak_tokens == 300


async def test_the_summarizer_is_called_once_per_compression(swe_files: list[Path]) -> None:
    summarizer = ExtractiveSummarizer()
    result = await replay_run(
        load_trajectory(swe_files[0]), context_size=8000, summarizer=summarizer
    )
    assert summarizer.calls == result.compressions > 0
