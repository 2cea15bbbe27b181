"""The scheduling hints .ci/test relies on still name real files of the model lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BALANCING, LONGEST_FIRST

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("path", LONGEST_FIRST)
def test_each_longest_first_file_exists_and_runs_the_model(path: str) -> None:
    text = (ROOT / path).read_text()
    assert any(name in text for name in ("llama_server", "demo_run", "local_model")), path


def test_the_model_lane_keeps_the_collection_order() -> None:
    script = (ROOT / ".ci" / "test").read_text()
    lane = script.split("CONTEXTFOLD_TEST_PIN_WORKERS=1", 1)[1].split("&\n", 1)[0]
    assert "--no-loadscope-reorder" in lane
    assert '-m "model and not serial"' in lane


@pytest.mark.parametrize("path", BALANCING)
def test_each_balancing_file_exists_and_starts_no_process(path: str) -> None:
    """Pinned to one CPU in the model lane, a file that started processes or servers of
    its own would share that CPU with them."""
    text = (ROOT / path).read_text()
    assert "subprocess" not in text, path
    assert "multiprocessing" not in text, path
