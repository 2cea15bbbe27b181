"""All 200 recorded tau-bench runs survive OpenAI -> Msg -> JSON -> Msg -> OpenAI unchanged."""

import json
from pathlib import Path
from typing import Any

import pytest

from contextfold.message import Msg, from_openai_messages, to_openai_messages

TAU = Path(__file__).parents[2] / "data" / "trajectories" / "tau-bench-airline-gpt4o"
RUNS: list[dict[str, Any]] = json.loads((TAU / "gpt-4o-airline.json").read_text())


def test_fixture_has_200_runs() -> None:
    assert len(RUNS) == 200


@pytest.mark.parametrize("run_index", range(len(RUNS)))
def test_tau_bench_run_round_trips_unchanged(run_index: int) -> None:
    original = RUNS[run_index]["traj"]
    msgs = from_openai_messages(original)
    restored = [Msg.model_validate_json(m.model_dump_json()) for m in msgs]
    assert to_openai_messages(restored) == original


def test_tau_bench_parses_to_one_msg_per_message_with_paired_tool_blocks() -> None:
    msgs = [m for run in RUNS for m in from_openai_messages(run["traj"])]
    wire = [m for run in RUNS for m in run["traj"]]
    assert len(msgs) == len(wire)
    calls = sum(len(m.tool_calls) for m in msgs)
    results = sum(len(m.tool_results) for m in msgs)
    assert calls == results == sum(1 for m in wire if m["role"] == "tool")
