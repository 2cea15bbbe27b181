"""``contextfold replay`` on every recorded-run format, detected or named with ``--format``."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

DATA = Path(__file__).parents[2] / "data" / "trajectories"
FOLDERS = [
    "claude-code-codemie",
    "claude-code-tracelab",
    "claude-code-harbor",
    "codex-codemie",
    "codex-tracelab",
    "openhands-multiswebench",
    "swe-agent-tests",
    "atif-harbor",
]
runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})


def _plain(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_every_format_replays_with_detection(cli: typer.Typer) -> None:
    paths = [str(DATA / f) for f in FOLDERS]
    result = runner.invoke(cli, ["replay", *paths, "-c", "16000", "--quiet"])
    assert result.exit_code == 0, result.output
    # 21: the three more codemie sessions copied for the idle-compaction benchmark.
    assert "Total over 21 run(s) (0 failed)" in _plain(result.output)
    assert "skipped" not in result.output


def test_format_option_loads_only_that_format(cli: typer.Typer) -> None:
    paths = [str(DATA / f) for f in FOLDERS]
    result = runner.invoke(cli, ["replay", *paths, "--format", "atif", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "Total over 3 run(s) (0 failed)" in _plain(result.output)


def test_a_named_file_of_another_format_is_a_usage_error(cli: typer.Typer) -> None:
    file = DATA / "atif-harbor" / "trajectory_pass.json"
    result = runner.invoke(cli, ["replay", str(file), "--format", "codex"])
    assert result.exit_code == 2
    assert "trajectory_pass.json: not a codex recording" in _plain(result.output)


def test_an_unknown_format_name_lists_the_known_ones(cli: typer.Typer) -> None:
    file = DATA / "atif-harbor" / "trajectory_pass.json"
    result = runner.invoke(cli, ["replay", str(file), "--format", "langsmith"])
    assert result.exit_code == 2
    assert "unknown format 'langsmith'; accepted formats: mini-swe-agent" in _plain(result.output)
