"""The cache-validation figure's own rules: the implicit-cache model, its fit and split, the
rebuilt request sequences, on fixed inputs."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.fig_cache_validation import (
    CallPrediction,
    ImplicitCache,
    ImplicitCall,
    LlamaCall,
    RecordedCall,
    Session,
    fit,
    llama_table,
    load_sessions,
    older_entries,
    predict,
    share_error,
    split_runs,
)

from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, Usage


def call(prompt: int, cached: int, shared: float, routed: float | None = None) -> ImplicitCall:
    return ImplicitCall(prompt, cached, shared, shared if routed is None else routed)


def test_the_implicit_model_reads_nothing_below_its_minimum() -> None:
    model = ImplicitCache(min_tokens=2048, granularity=1, hit_rate=1.0)
    assert model.read(call(3000, 0, 2047)) == 0
    assert model.read(call(3000, 0, 2048)) == 2048


def test_the_implicit_model_rounds_down_to_its_granularity_and_scales_by_the_hit_rate() -> None:
    model = ImplicitCache(min_tokens=0, granularity=2048, hit_rate=0.5)
    assert model.read(call(9000, 0, 5000)) == 0.5 * 4096


def test_the_routed_variant_reads_only_what_the_same_backend_saw() -> None:
    shared_elsewhere = call(9000, 0, shared=8192, routed=0)
    assert ImplicitCache(0, 1, 1.0, routed=True).read(shared_elsewhere) == 0
    assert ImplicitCache(0, 1, 1.0).read(shared_elsewhere) == 8192


def test_the_share_error_is_over_the_run_total() -> None:
    model = ImplicitCache(0, 1, 1.0)
    run = [call(1000, 0, 0), call(2000, 500, 1000)]
    assert share_error(model, run) == (1000 - 500) / 3000


def test_the_split_is_by_sorted_instance_id_alternating() -> None:
    fit_half, held_out = split_runs(["c", "a", "d", "b", "e"])
    assert fit_half == ["a", "c", "e"]
    assert held_out == ["b", "d"]


def test_the_fit_recovers_the_rules_that_made_the_data() -> None:
    truth = ImplicitCache(min_tokens=1024, granularity=2048, hit_rate=0.8)
    runs = []
    for r in range(4):
        calls = [call(4000 + 3000 * k + 97 * r, 0, 3000 * k + 97 * r + 500) for k in range(8)]
        runs.append([ImplicitCall(c.prompt, int(truth.read(c)), c.shared, c.shared) for c in calls])
    fitted = fit(runs, routed=False)
    assert all(abs(share_error(fitted, run)) < 1e-3 for run in runs)
    assert (fitted.granularity, fitted.hit_rate) == (2048, 0.8)


def test_a_predicted_read_is_scaled_to_the_recorded_prompt() -> None:
    prediction = CallPrediction(
        at=0, input_tokens=2000, cache_read=900, sim_total=1000, sim_read=400
    )
    assert prediction.sim_share == 0.4
    assert prediction.scaled_read == 800


def _claude_line(kind: str, content: object, t: int, **extra: object) -> str:
    message: dict[str, object] = {"role": kind, "content": content}
    message.update(extra)
    return json.dumps(
        {
            "type": kind,
            "sessionId": "s",
            "timestamp": f"2026-01-01T00:00:{t:02d}Z",
            "message": message,
        }
    )


def test_claude_code_calls_are_timed_by_their_first_line_and_rebuilt_from_what_precedes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "claude-code-x"
    folder.mkdir()
    usage = {"input_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 3000}
    read = {"input_tokens": 5, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 100}
    lines = [
        _claude_line("user", "fix the bug", 0),
        _claude_line(
            "assistant",
            [{"type": "text", "text": "looking"}],
            2,
            id="m1",
            usage=usage,
        ),
        _claude_line(
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a.py"}}],
            3,
            id="m1",
            usage=usage,
        ),
        _claude_line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}], 4),
        _claude_line("assistant", [{"type": "text", "text": "done"}], 9, id="m2", usage=read),
    ]
    (folder / "s.jsonl").write_text("\n".join(lines) + "\n")
    (session,) = load_sessions(tmp_path)
    assert session.agent == "claude-code"
    assert [c.at for c in session.calls] == [0.0, 7.0]
    assert [len(c.history) for c in session.calls] == [1, 3]
    assert [c.cache_read for c in session.calls] == [0, 3000]


def test_the_stand_in_prefix_is_sized_from_the_first_call_and_read_back() -> None:
    first = [Msg("user", "fix the bug", "user")]
    answer = Msg(
        "assistant",
        [TextBlock(text="looking"), ToolCallBlock(id="t1", name="Read", input={})],
        "assistant",
        usage=Usage(input_tokens=20_000),
    )
    result = Msg("tool", [ToolResultBlock(id="t1", name="Read", output="x" * 50)], "user")
    session = Session(
        "s",
        "claude-code",
        None,
        [
            RecordedCall(first, 0.0, 20_000, 0),
            RecordedCall([*first, answer, result], 5.0, 20_100, 19_990),
        ],
    )
    prefix, calls = predict(session)
    assert 19_000 < prefix < 20_000
    assert calls[0].sim_read == 0
    assert calls[1].sim_read == calls[0].sim_total  # the whole first request, prefix included
    _, bare = predict(session, with_prefix=False)
    assert bare[1].sim_total < calls[1].sim_total


def test_the_llama_table_totals_what_llama_reused_against_the_prediction() -> None:
    calls = [
        LlamaCall("reasoning", 0, 100, 0, 98, 0, 0),
        LlamaCall("reasoning", 1, 150, 99, 148, 97, 97),
        LlamaCall("summary", 2, 200, 149, 198, 146, 146),
    ]
    text = llama_table(calls)
    assert "llama.cpp reused 248 of 450" in text
    assert "predicts 243 of 444" in text
    assert "1 compactions" in text


def test_a_read_of_an_entry_older_than_the_newest_is_counted() -> None:
    def recorded(read: int, write: int) -> RecordedCall:
        return RecordedCall([], 0.0, read + write, read, write)

    calls = [
        recorded(0, 1000),  # writes an entry of 1,000
        recorded(1000, 200),  # reads it, writes one of 1,200
        recorded(1000, 400),  # served the older 1,000-token entry: counted
        recorded(1400, 100),  # reads the newest entry
        recorded(0, 1600),  # a miss, not a read of an older entry
    ]
    assert older_entries(calls) == (1, 3)
