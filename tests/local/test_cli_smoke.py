"""The ``contextfold`` CLI: version.

The demo command is tested in ``tests/cli``; the count-equals-prompt_tokens check the old
smoke demo printed is ``test_local_counter.py::test_count_equals_prompt_tokens_...``.
"""

from __future__ import annotations

from typer.testing import CliRunner

from contextfold.cli import app

runner = CliRunner()


def test_version_prints_the_package_name() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("contextfold ")
