"""``replay`` reads its input within bounds (issue 28): a file over ``max_bytes`` is
refused unread, a binary file after its first bytes, a JSONL line over ``max_line`` and
JSON nested deeper than ``max_depth`` with a one-line error naming the file and the limit,
never a ``RecursionError`` traceback. Limits are lowered here to keep the files small;
the 100,000-deep nesting and the 1 GiB file are real."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from contextfold import MessageFormatError
from contextfold.replay import ReadLimits, load_any, load_recordings

runner = CliRunner(env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})

_RUN = [
    {"role": "user", "content": "list the files"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
    {"role": "assistant", "content": "Two files."},
]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _error(path: Path, limits: ReadLimits | None = None) -> str:
    with pytest.raises(MessageFormatError) as caught:
        load_any(path, limits=limits)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_json_nested_100000_deep_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(_deep(100_000))
    assert "nested deeper than the limit of 256 levels" in _error(path)


def test_a_jsonl_line_nested_100000_deep_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"type": "user"}\n' + _deep(100_000) + "\n")
    assert f"{path}:2: JSON nested deeper" in _error(path)


def test_deep_tool_arguments_inside_a_string_are_refused(tmp_path: Path) -> None:
    run = json.loads(json.dumps(_RUN))
    run[1]["tool_calls"][0]["function"]["arguments"] = _deep(100_000)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    # the JSON document is shallow, the arguments in one of its strings are not: refused,
    # naming the file, not a RecursionError from the message decoder
    assert "nested too deeply to read" in _error(path)


def test_depth_limit_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_RUN))
    # list > message > tool_calls > call > function: 5 levels
    assert len(load_any(path, limits=ReadLimits(max_depth=5))[0].messages) == 4
    message = _error(path, ReadLimits(max_depth=4))
    assert "limit of 4 levels (ReadLimits.max_depth, replay --max-depth)" in message


def test_a_file_over_max_bytes_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as file:  # 1 GiB, sparse: no disk used
        file.truncate(1024**3)
    tracemalloc.start()
    try:
        message = _error(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "1,073,741,824 bytes, over the limit of 268,435,456" in message
    assert "--max-file-mb" in message
    assert peak < 1_000_000


def test_max_bytes_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_RUN))
    size = path.stat().st_size
    assert load_any(path, limits=ReadLimits(max_bytes=size))
    assert f"over the limit of {size - 1:,}" in _error(path, ReadLimits(max_bytes=size - 1))


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (b"\x7fELF\x02\x01\x01\x00", "a NUL byte at byte 7"),
        (b"\xff\xd8\xff\xe0JFIF", "invalid UTF-8 at byte 0"),
        (b'[{"role": "user", "content": "caf\xe9"}]', "invalid UTF-8 at byte 33"),
    ],
)
def test_a_binary_file_is_told_from_its_first_bytes(tmp_path: Path, head: bytes, why: str) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(head + os.urandom(4 * 1024 * 1024))
    tracemalloc.start()
    try:
        message = _error(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"a binary file, not a JSON recording ({why})" in message
    assert peak < 1_000_000  # 8 KiB looked at, not 4 MiB read


def test_a_utf8_character_cut_by_the_sniff_is_still_text(tmp_path: Path) -> None:
    run = json.loads(json.dumps(_RUN))
    run[0]["content"] = "x" * 8191 + "é" * 100  # é's two bytes straddle byte 8192
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run, ensure_ascii=False), encoding="utf-8")
    assert load_any(path)[0].messages[0].text == run[0]["content"]


def test_a_jsonl_line_over_max_line_is_refused_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"type": "user"}\n' + json.dumps({"text": "y" * 500}) + "\n")
    message = _error(path, ReadLimits(max_line=100))
    assert f"{path}:2: a line over the limit of 100 characters" in message


def test_in_a_directory_a_file_over_a_limit_is_skipped_with_why(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps(_RUN))
    (tmp_path / "core.json").write_bytes(b"\x00" * 100)
    (tmp_path / "deep.json").write_text(_deep(100_000))
    loaded = load_recordings([tmp_path])
    assert len(loaded.runs) == 1
    reasons = {path.name: why for path, why in loaded.skipped}
    assert "binary file" in reasons["core.json"]
    assert "nested deeper" in reasons["deep.json"]


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        (_deep(100_000).encode(), [], "nested deeper than the limit of 256 levels"),
        (b"\x00\x01\x02" * 100, [], "a binary file, not a JSON recording"),
        (json.dumps(_RUN).encode(), ["--max-file-mb", "1", "--max-depth", "2"], "--max-depth"),
    ],
)
def test_the_cli_prints_one_line_and_exits_2(
    cli: typer.Typer, tmp_path: Path, content: bytes, args: list[str], expected: str
) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    result = runner.invoke(cli, ["replay", str(path), *args])
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, RecursionError)
    assert "Traceback" not in result.output
    assert expected in " ".join(result.stderr.replace("│", " ").split())
