"""Issue 27: does each grader separate the skeptic's trivial strategy from the mechanism?

The trivial strategy is drop-oldest plus the paste summarizer (``benchmarks/_trivial.py``:
the dropped span's commands and error-grep lines in the summary slot, capped at the same
6,000-token budget); the mechanism is ``contextfold replay`` itself (its CLI, this
checkout's sources) at the same 16k window. The fixture is a run whose agent, like the
recorded ones, goes back to names it read in earlier outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks._trivial import paste_lines, paste_summary
from benchmarks._whole_run import (
    Recording,
    SentView,
    grade_needed,
    grade_whole_run,
    load_recording,
)
from benchmarks.retention_whole_run import (
    contextfold_views,
    drop_oldest_views,
    replay_dumps,
    summary_budget,
)

FILLER = "\n".join(f"    total_{i} = add({i}) + offset  # line {i}" for i in range(90))


def _write_run(tmp_path: Path, steps: int = 50) -> Path:
    """Each step greps a module and reads a function name in the output; twenty steps later
    the agent calls that function by name."""
    messages = [
        {"role": "system", "content": "You run one shell command per step."},
        {"role": "user", "content": "Fix the failing tests in src/pkg."},
    ]
    for k in range(steps):
        command = f"grep -n helper_{k} src/pkg/mod_{k}.py"
        if k >= 20:
            command += f" && python -c 'from pkg.mod_{k - 20} import *; compute_total_{k - 20}()'"
        messages.append(
            {"role": "assistant", "content": f"THOUGHT: step {k}.\n\n```bash\n{command}\n```"}
        )
        error = f"ValueError: bad value in mod_{k}\n" if k % 3 == 0 else ""
        body = f"{k}:def compute_total_{k}(rows):\n{error}{FILLER}"
        messages.append(
            {"role": "user", "content": f"<returncode>1</returncode>\n<output>\n{body}\n</output>"}
        )
    path = tmp_path / "synthetic.traj.json"
    run = {"instance_id": "synthetic", "trajectory_format": "mini-swe-agent-1"}
    path.write_text(json.dumps({**run, "info": {}, "messages": messages}), encoding="utf-8")
    return path


def _count(text: str) -> int:
    from contextfold.token import counter_for_model

    return counter_for_model("gpt-4o").count_text(text)


def _trivial_views(recording: Recording) -> list[SentView]:
    """Drop oldest, then paste every dropped command and error-grep line, capped."""
    views = []
    for view in drop_oldest_views(recording):
        dropped = [
            m for m in recording.before(view.step) if not all(k in view.context for k in m.keys)
        ]
        lines = paste_lines(
            [m.command for m in dropped if m.command is not None],
            [m.output for m in dropped if m.output is not None],
        )
        pasted = " ".join(paste_summary([], lines, summary_budget(), _count).split())
        views.append(SentView(view.step, view.context, f"{pasted}\x00{view.full}"))
    return views


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, object]]:
    tmp = tmp_path_factory.mktemp("separation")
    path = _write_run(tmp)
    recording = load_recording(path)
    replay_dumps([path], "extractive", tmp / "dumps")
    mechanism = contextfold_views(tmp / "dumps" / "synthetic.jsonl")
    trivial = _trivial_views(recording)
    return {
        "mechanism": (grade_whole_run(recording, mechanism), grade_needed(recording, mechanism)),
        "trivial": (grade_whole_run(recording, trivial), grade_needed(recording, trivial)),
    }


def test_the_needed_fact_grader_separates_paste_from_the_mechanism(graded: dict) -> None:
    """The names the agent uses next were read in outputs: a paste of commands and error
    lines does not carry them; the mechanism's summary does."""
    _, mechanism = graded["mechanism"]
    _, trivial = graded["trivial"]
    assert mechanism.needed["names"] >= 10
    assert trivial.needed["names"] >= 10
    assert mechanism.rate("names") >= 0.9, mechanism.examples
    assert trivial.rate("names") <= 0.6, trivial.examples
    assert mechanism.rate("names") - trivial.rate("names") >= 0.3


def test_whole_run_retention_does_not_separate_paste_from_the_mechanism(graded: dict) -> None:
    """Whole-run retention grades commands, paths and error lines: exactly what the paste
    copies, so within its budget the trivial row keeps them all (BENCHMARKS.md says so)."""
    mechanism, _ = graded["mechanism"]
    trivial, _ = graded["trivial"]
    assert trivial.graded["commands"] >= 20
    for kind in ("paths", "commands", "error lines"):
        assert trivial.kept_rate(kind) == 1.0, (kind, trivial.examples.get(kind))
        assert (mechanism.kept_rate(kind) or 0) <= trivial.kept_rate(kind)
