"""Loading recorded runs: mini-swe-agent trajectories, tau-bench runs, our JSONL."""

import json
import re
from pathlib import Path

import pytest

from contextfold._exceptions import MessageFormatError
from contextfold.message import (
    Msg,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    check_anthropic_valid,
    check_openai_valid,
    msgs_to_jsonl,
)
from contextfold.replay import load_any, load_msg_jsonl, load_openai_runs, load_trajectory

DATA = Path(__file__).parents[2] / "data" / "trajectories"
SWE = DATA / "swebench-verified-gemini3pro"
SWE_FILES = sorted(SWE.glob("*.traj.json"))
TAU_FILE = DATA / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"
ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def test_there_are_44_swe_runs() -> None:
    assert len(SWE_FILES) == 44


@pytest.mark.parametrize("path", SWE_FILES, ids=lambda p: p.name.removesuffix(".traj.json"))
def test_every_tool_call_has_exactly_one_result_right_after_it(path: Path) -> None:
    traj = load_trajectory(path)
    msgs = traj.messages
    for i, msg in enumerate(msgs):
        for call in msg.tool_calls:
            assert msg.role == "assistant"
            assert len(msg.tool_calls) == 1
            nxt = msgs[i + 1]
            assert [r.id for r in nxt.tool_results] == [call.id]
        for result in msg.tool_results:
            assert [c.id for c in msgs[i - 1].tool_calls] == [result.id]
    assert check_openai_valid(traj.all_messages()) == []
    assert check_anthropic_valid(traj.all_messages()) == []


@pytest.mark.parametrize("path", SWE_FILES, ids=lambda p: p.name.removesuffix(".traj.json"))
def test_counts_match_the_raw_file(path: Path) -> None:
    raw = json.loads(path.read_text())
    traj = load_trajectory(path)
    assert traj.instance_id == raw["instance_id"]
    assert traj.system == raw["messages"][0]["content"]
    assert len(traj.messages) == len(raw["messages"]) - 1
    one_action = [
        m
        for m in raw["messages"]
        if m["role"] == "assistant" and len(ACTION.findall(m["content"])) == 1
    ]
    calls = [c for m in traj.messages for c in m.tool_calls]
    assert len(calls) == len(one_action) > 0
    assert [c.input["command"] for c in calls] == [
        ACTION.findall(m["content"])[0] for m in one_action
    ]


def test_result_keeps_return_code_and_output_text() -> None:
    traj = load_trajectory(SWE / "psf__requests-1142.traj.json")
    result = traj.messages[2].tool_results[0]
    assert result.metadata == {"returncode": 0}
    assert result.output.startswith(".:\nAUTHORS.rst\n")
    assert not result.is_error


def test_nonzero_return_code_is_an_error_result() -> None:
    results = [r for p in SWE_FILES for m in load_trajectory(p).messages for r in m.tool_results]
    failed = [r for r in results if r.metadata.get("returncode", 0) != 0]
    assert failed
    assert all(r.is_error for r in failed)


def test_huge_output_of_requests_1142_loads_whole() -> None:
    traj = load_trajectory(SWE / "psf__requests-1142.traj.json")
    longest = max(len(r.text()) for m in traj.messages for r in m.tool_results)
    assert longest > 500_000
    assert traj.messages[-1].tool_results[0].metadata == {"submission": True}


def test_format_error_turn_stays_plain_text() -> None:
    traj = load_trajectory(SWE / "astropy__astropy-14598.traj.json")
    raw = json.loads((SWE / "astropy__astropy-14598.traj.json").read_text())["messages"]
    assert len(ACTION.findall(raw[38]["content"])) == 2
    assert traj.messages[37].content == raw[38]["content"]
    assert traj.messages[38].content == raw[39]["content"]


def test_timeout_answer_is_an_error_result() -> None:
    traj = load_trajectory(SWE / "scikit-learn__scikit-learn-25232.traj.json")
    timeouts = [r for m in traj.messages for r in m.tool_results if r.metadata.get("timeout")]
    assert len(timeouts) == 2
    assert all(r.is_error for r in timeouts)


def test_loading_is_deterministic_and_json_round_trips() -> None:
    path = SWE / "django__django-11095.traj.json"
    a, b = load_trajectory(path), load_trajectory(path)
    assert [m.id for m in a.messages] == [m.id for m in b.messages]
    assert a.messages[1].tool_calls[0].id == "django__django-11095-2"
    assert [Msg.model_validate_json(m.model_dump_json()) for m in a.messages] == a.messages


def test_usage_and_optional_reasoning_come_from_the_recorded_response() -> None:
    traj = load_trajectory(SWE / "psf__requests-1142.traj.json", include_reasoning=True)
    first = traj.messages[1]
    assert first.usage is not None
    assert first.usage.input_tokens == 1379
    assert isinstance(first.blocks()[0], ThinkingBlock)
    assert isinstance(first.blocks()[-1], ToolCallBlock)


def test_tau_bench_runs_load_with_system_prompt_split_off() -> None:
    runs = load_openai_runs(TAU_FILE)
    assert len(runs) == 200
    assert len({r.instance_id for r in runs}) == 200
    assert all(r.system and r.system.startswith("# Airline Agent Policy") for r in runs)
    assert all(r.messages[0].role == "user" for r in runs)
    assert runs[0].info["reward"] in (0.0, 1.0)


def test_msg_jsonl_loads(tmp_path: Path) -> None:
    msgs = [
        Msg("system", "sys", "system"),
        Msg("user", "hi", "user"),
        Msg("bot", "yo", "assistant"),
    ]
    path = tmp_path / "run.jsonl"
    path.write_text(msgs_to_jsonl(msgs))
    traj = load_msg_jsonl(path)
    assert (traj.instance_id, traj.system, traj.messages) == ("run", "sys", msgs[1:])


def test_load_any_detects_each_format(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(msgs_to_jsonl([Msg("user", "hi", "user")]))
    plain = tmp_path / "b.json"
    plain.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert load_any(SWE / "psf__requests-1142.traj.json")[0].format == "mini-swe-agent-1"
    assert len(load_any(TAU_FILE)) == 200
    assert load_any(jsonl)[0].format == "msg-jsonl"
    assert load_any(plain)[0].messages[0].text == "hi"


def test_load_any_rejects_unknown_content_naming_file_and_formats(tmp_path: Path) -> None:
    path = tmp_path / "weird.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(
        MessageFormatError,
        match=r"weird\.json: unrecognised recording; accepted formats: mini-swe-agent",
    ):
        load_any(path)


def test_load_any_rejects_invalid_json_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{nope")
    with pytest.raises(MessageFormatError, match=r"broken\.json: not valid JSON"):
        load_any(path)


def test_tool_result_blocks_are_answers_to_bash() -> None:
    traj = load_trajectory(SWE / "sympy__sympy-13031.traj.json")
    results = [r for m in traj.messages for r in m.tool_results]
    assert results
    assert all(isinstance(r, ToolResultBlock) and r.name == "bash" for r in results)
