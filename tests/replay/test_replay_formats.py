"""Other agents' session formats: Claude Code, Codex, OpenHands, SWE-agent, ATIF.

Each recorded session loads with the tool calls, results and per-call usage its README
states; the usage is checked against the raw records read independently here; a file
that matches no format gets an error naming the formats.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from contextfold._exceptions import MessageFormatError
from contextfold.message import Usage, check_anthropic_valid, check_openai_valid
from contextfold.replay import FORMATS, Trajectory, load_any, load_recordings

DATA = Path(__file__).parents[2] / "data" / "trajectories"
CLAUDE = DATA / "claude-code-codemie"
CODEX = (
    DATA
    / "codex-codemie"
    / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
)

# (file, format, runs, tool calls per run, calls with usage per run): the READMEs' figures
CASES = [
    (CLAUDE / "session-9eda1058.jsonl", "claude-code", [3], [5]),
    (CLAUDE / "session-624a4a58.jsonl", "claude-code", [48], [55]),
    (CLAUDE / "3fb74381-1bf4-475e-8c6f-442d872b1bcf.jsonl", "claude-code", [2], [6]),
    (
        CLAUDE / "tmp-private" / "4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
        "claude-code",
        [6],
        [7],
    ),
    (CLAUDE / "tmp-private" / "agent-36541525.jsonl", "claude-code", None, [1]),
    (DATA / "claude-code-tracelab" / "claude-session-01.jsonl", "claude-code", None, None),
    (
        DATA / "claude-code-harbor" / "d7d4e19e-608d-44ef-b166-cd050ef274ba.jsonl",
        "claude-code",
        [1],
        [2],
    ),
    (CODEX, "codex", [102], [66]),
    (DATA / "codex-tracelab", "codex", None, None),
    (DATA / "openhands-multiswebench" / "output.jsonl", "openhands", [23, 33, 49], [23, 33, 49]),
    (DATA / "swe-agent-tests" / "6e44b9__sweagenttestrepo-1c2844.traj", "swe-agent", [4], [0]),
    (DATA / "swe-agent-tests" / "pydicom__pydicom-1458.traj", "swe-agent", [12], [0]),
    (DATA / "atif-harbor" / "trajectory_pass.json", "atif", [12], None),
    (DATA / "atif-harbor" / "trajectory_fail.json", "atif", [46], None),
    (DATA / "atif-harbor" / "hello-d7d4e19e.trajectory.json", "atif", [1], [2]),
]


def _load(path: Path) -> list[Trajectory]:
    if path.is_dir():
        return [run for run, _ in load_recordings([path]).runs]
    return load_any(path)


def _calls(run: Trajectory) -> int:
    return sum(len(m.tool_calls) for m in run.messages)


def _usages(run: Trajectory) -> list[Usage]:
    return [m.usage for m in run.messages if m.usage is not None]


@pytest.mark.parametrize(
    ("path", "fmt", "calls", "usages"), CASES, ids=[c[0].name[:24] for c in CASES]
)
def test_each_session_loads_with_its_calls_and_usage(
    path: Path, fmt: str, calls: list[int] | None, usages: list[int] | None
) -> None:
    runs = _load(path)
    assert {r.format for r in runs} == {fmt}
    if calls is not None:
        assert [_calls(r) for r in runs] == calls
    if usages is not None:
        assert [len(_usages(r)) for r in runs] == usages
    for run in runs:
        results = {b.id for m in run.messages for b in m.tool_results}
        unanswered = [c for m in run.messages for c in m.tool_calls if c.id not in results]
        # Every call has its result, except a run's last action (a finish or submit).
        assert len(unanswered) <= 1
        assert all(b.name for m in run.messages for b in m.tool_results)


@pytest.mark.parametrize(
    "path", [c[0] for c in CASES if c[1] in ("claude-code", "atif", "codex") and c[0].is_file()]
)
def test_sessions_whose_every_call_is_answered_are_valid_requests(path: Path) -> None:
    for run in load_any(path):
        assert check_openai_valid(run.all_messages()) == []
        assert check_anthropic_valid(run.all_messages()) == []


def _claude_usage_by_hand(path: Path) -> list[Usage]:
    """Usage once per ``message.id``, ``output_tokens`` from its last line (the README)."""
    last: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        message = row.get("message")
        if row.get("type") != "assistant" or row.get("isSidechain") or not message.get("usage"):
            continue
        last[message["id"]] = message["usage"]
    out = []
    for u in last.values():
        read, write = u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0)
        out.append(
            Usage(
                input_tokens=u["input_tokens"] + read + write,
                output_tokens=u["output_tokens"],
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
        )
    return out


@pytest.mark.parametrize(
    "path", [CLAUDE / "session-624a4a58.jsonl", CLAUDE / "session-9eda1058.jsonl"], ids=str
)
def test_claude_code_usage_is_counted_once_per_response(path: Path) -> None:
    (run,) = load_any(path)
    assert _usages(run) == _claude_usage_by_hand(path)


def test_codex_usage_is_the_last_token_usage_of_each_call() -> None:
    expected = []
    for line in CODEX.read_text().splitlines():
        row = json.loads(line)
        payload = row.get("payload") or {}
        if payload.get("type") == "token_count" and payload.get("info"):
            last = payload["info"]["last_token_usage"]
            expected.append(
                Usage(
                    input_tokens=last["input_tokens"],
                    output_tokens=last["output_tokens"],
                    cache_read_tokens=last["cached_input_tokens"],
                )
            )
    (run,) = load_any(CODEX)
    assert _usages(run) == expected
    cached = sum(u.cache_read_tokens for u in expected)
    assert cached / sum(u.input_tokens for u in expected) == pytest.approx(0.81, abs=0.01)


def test_the_claude_code_and_atif_copies_of_one_session_agree() -> None:
    (claude,) = load_any(DATA / "claude-code-harbor" / "d7d4e19e-608d-44ef-b166-cd050ef274ba.jsonl")
    (atif,) = load_any(DATA / "atif-harbor" / "hello-d7d4e19e.trajectory.json")
    assert [c.name for m in claude.messages for c in m.tool_calls] == ["Write"]
    assert [c.input for m in claude.messages for c in m.tool_calls] == [
        c.input for m in atif.messages for c in m.tool_calls
    ]
    assert [(u.input_tokens, u.cache_read_tokens) for u in _usages(claude)] == [
        (u.input_tokens, u.cache_read_tokens) for u in _usages(atif)
    ]


def test_swe_agent_runs_carry_their_per_run_usage() -> None:
    (run,) = load_any(DATA / "swe-agent-tests" / "pydicom__pydicom-1458.traj")
    assert run.info["version"] == "0.x"
    assert run.info["model_stats"]["tokens_sent"] == 122_612
    (native,) = load_any(DATA / "swe-agent-tests" / "6e44b9__sweagenttestrepo-1c2844.traj")
    assert native.info["version"] == "1.x"
    assert ast.literal_eval(repr(native.info["model_stats"]))["api_calls"] == 5


def test_openhands_cache_counters_are_present_and_zero() -> None:
    runs = load_any(DATA / "openhands-multiswebench" / "output.jsonl")
    totals = [r.info["metrics"]["accumulated_token_usage"] for r in runs]
    assert all(t["cache_read_tokens"] == 0 and t["cache_write_tokens"] == 0 for t in totals)
    assert all(u.cache_read_tokens == 0 for r in runs for u in _usages(r))


def test_a_file_of_no_known_format_gets_an_error_naming_the_formats(tmp_path: Path) -> None:
    strange = tmp_path / "events.jsonl"
    strange.write_text('{"event": "start"}\n{"event": "stop"}\n')
    with pytest.raises(
        MessageFormatError, match="unrecognised recording; accepted formats: "
    ) as info:
        load_any(strange)
    assert all(name in str(info.value) for name in FORMATS)


def test_a_malformed_line_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "session.jsonl"
    lines = (CLAUDE / "session-9eda1058.jsonl").read_text().splitlines()
    broken.write_text("\n".join([*lines[:3], '{"type": "user", "mess', *lines[3:]]) + "\n")
    with pytest.raises(MessageFormatError, match=r"session\.jsonl:4: not a JSON line"):
        load_any(broken)


def test_a_given_format_is_used_and_checked() -> None:
    (run,) = load_any(CODEX, format="codex")
    assert run.format == "codex"
    with pytest.raises(MessageFormatError, match="not a claude-code recording"):
        load_any(CODEX, format="claude-code")
    with pytest.raises(MessageFormatError, match="unknown format 'kodex'; accepted formats: "):
        load_any(CODEX, format="kodex")
