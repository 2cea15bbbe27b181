"""The replay and inspect commands through Typer's test runner: output and exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from contextfold.replay import ReplayResult

# Wide enough that tables and error panels do not fold names.
runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})


def _plain(text: str) -> str:
    """Output without panel borders and line wrapping."""
    return " ".join(text.replace("│", " ").split())


def _copy(files: list[Path], into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    for f in files:
        (into / f.name).write_bytes(f.read_bytes())
    return into


def test_replay_prints_runs_and_totals_and_writes_json(
    cli: typer.Typer, swe_files: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "m.json"
    args = ["replay", *map(str, swe_files[:2]), "-c", "8000", "--json", str(out)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "Total over 2 run(s) (0 failed)" in result.stdout
    assert swe_files[0].name.removesuffix(".traj.json")[:12] in result.stdout
    data = ReplayResult.model_validate_json(out.read_text())
    assert data.context_size == 8000
    assert len(data.runs) == 2
    assert data.totals.compressions > 0
    assert json.loads(out.read_text())["totals"]["steps"] == data.totals.steps


def test_replay_accepts_a_directory_and_skips_other_json(
    cli: typer.Typer, swe_files: list[Path], tmp_path: Path
) -> None:
    folder = _copy(swe_files[:1], tmp_path / "runs")
    (folder / "settings.json").write_text('{"model": "x"}')
    result = runner.invoke(cli, ["replay", str(folder), "-c", "8000", "-q"])
    assert result.exit_code == 0, result.output
    assert "Total over 1 run(s)" in result.stdout
    assert "skipped" in result.stderr
    assert "settings.json" in result.stderr


def test_replay_of_tau_bench_runs(cli: typer.Typer, tau_file: Path) -> None:
    result = runner.invoke(cli, ["replay", str(tau_file), "-c", "3500", "--limit", "5", "-q"])
    assert result.exit_code == 0, result.output
    assert "Total over 5 run(s) (0 failed)" in result.stdout


def test_missing_path_is_a_usage_error(cli: typer.Typer, tmp_path: Path) -> None:
    missing = tmp_path / "nope.traj.json"
    result = runner.invoke(cli, ["replay", str(missing)])
    assert result.exit_code == 2
    assert "no such file or directory" in _plain(result.output)
    assert "nope.traj.json" in _plain(result.output)


def test_unknown_format_names_the_file_and_the_accepted_formats(
    cli: typer.Typer, tmp_path: Path
) -> None:
    bad = tmp_path / "weird.json"
    bad.write_text('{"hello": "world"}')
    result = runner.invoke(cli, ["replay", str(bad)])
    assert result.exit_code == 2
    assert "weird.json" in _plain(result.output)
    assert "accepted formats" in _plain(result.output)


def test_a_directory_without_recordings_is_a_usage_error(cli: typer.Typer, tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("nothing here")
    result = runner.invoke(cli, ["replay", str(tmp_path)])
    assert result.exit_code == 2
    assert "no recorded runs found" in _plain(result.output)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-c", "0"], "--context-size"),
        (["--summarizer", "gpt4"], "unknown summarizer"),
        (["--tool-result-limit", "-5"], "--tool-result-limit"),
    ],
    ids=["context_size", "summarizer", "tool_result_limit"],
)
def test_bad_options_are_usage_errors(
    cli: typer.Typer, swe_files: list[Path], args: list[str], expected: str
) -> None:
    result = runner.invoke(cli, ["replay", str(swe_files[0]), *args])
    assert result.exit_code == 2
    assert expected in _plain(result.output)


def test_a_provider_summarizer_without_a_key_says_which_variable_to_set(
    cli: typer.Typer, swe_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(cli, ["replay", str(swe_files[0]), "-s", "openai:gpt-4o-mini"])
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in _plain(result.output)


def test_report_without_plotly_names_the_extra(
    cli: typer.Typer, swe_files: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)
    result = runner.invoke(cli, ["replay", str(swe_files[0]), "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "contextfold[report]" in _plain(result.output)


def test_an_output_that_cannot_be_written_fails_with_exit_code_1(
    cli: typer.Typer, swe_files: list[Path], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(
        cli, ["replay", str(swe_files[0]), "-c", "8000", "--json", str(blocker / "m.json")]
    )
    assert result.exit_code == 1
    assert "cannot write --json" in result.stderr


def test_a_failing_run_gives_exit_code_1(
    cli: typer.Typer, swe_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextfold.replay import _runner

    class Broken(_runner.ContextEngine):
        async def prepare(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("broken window")

    monkeypatch.setattr(_runner, "ContextEngine", Broken)
    result = runner.invoke(cli, ["replay", str(swe_files[0]), "-q"])
    assert result.exit_code == 1
    assert "RuntimeError: broken window" in result.stderr


# -- inspect ---------------------------------------------------------------------------


@pytest.fixture
def workdir(cli: typer.Typer, swe_files: list[Path], tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    args = ["replay", str(swe_files[0]), "-c", "4000", "--tool-result-limit", "300"]
    result = runner.invoke(cli, [*args, "--workdir", str(wd), "-q"])
    assert result.exit_code == 0, result.output
    return wd


def _session(swe_files: list[Path]) -> str:
    return swe_files[0].name.removesuffix(".traj.json")


def test_inspect_lists_sessions_with_sizes(
    cli: typer.Typer, workdir: Path, swe_files: list[Path]
) -> None:
    result = runner.invoke(cli, ["inspect", str(workdir)])
    assert result.exit_code == 0, result.output
    assert _session(swe_files) in result.stdout
    assert "KB" in result.stdout


def test_inspect_session_lists_context_and_tool_results(
    cli: typer.Typer, workdir: Path, swe_files: list[Path]
) -> None:
    session = _session(swe_files)
    result = runner.invoke(cli, ["inspect", str(workdir), session])
    assert result.exit_code == 0, result.output
    assert f"sessions/{session}/context.jsonl" in result.stdout
    assert "tool_result" in result.stdout


def test_inspect_shows_a_context_log_as_messages(
    cli: typer.Typer, workdir: Path, swe_files: list[Path]
) -> None:
    session = _session(swe_files)
    args = ["inspect", str(workdir), session, "--item", "context.jsonl", "--limit", "2"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "[0] user user" in result.stdout
    assert "[1] assistant assistant" in result.stdout
    assert "[2]" not in result.stdout


def test_inspect_shows_an_offloaded_tool_result_in_full(
    cli: typer.Typer, workdir: Path, swe_files: list[Path]
) -> None:
    session = _session(swe_files)
    tool_results = sorted((workdir / "sessions" / session).glob("tool_result-*"))
    assert tool_results
    path = f"sessions/{session}/{tool_results[0].name}"
    result = runner.invoke(cli, ["inspect", str(workdir), "--item", path])
    assert result.exit_code == 0, result.output
    assert tool_results[0].read_text()[:200] in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["{wd}", "no-such-session"], "no session 'no-such-session'"),
        (["{wd}", "--item", "sessions/x/context.jsonl"], "no such item"),
        (["{wd}/missing"], "no such directory"),
        (["{tmp}"], "is not a contextfold workspace"),
    ],
    ids=["session", "item", "workdir", "not_a_workspace"],
)
def test_inspect_errors_are_usage_errors(
    cli: typer.Typer, workdir: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    filled = [a.format(wd=workdir, tmp=empty) for a in args]
    result = runner.invoke(cli, ["inspect", *filled])
    assert result.exit_code == 2
    assert expected in _plain(result.output)
