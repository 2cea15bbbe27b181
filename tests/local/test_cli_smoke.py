"""The ``contextfold`` CLI: version and the embedded-model smoke demo."""

from __future__ import annotations

from typer.testing import CliRunner

from contextfold.cli import app

runner = CliRunner()


def test_version_prints_the_package_name() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("contextfold ")


def test_demo_answers_and_reports_matching_token_counts() -> None:
    result = runner.invoke(app, ["demo", "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    assert "A:" in result.output
    assert "OK: the count equals llama.cpp's prompt_tokens" in result.output
