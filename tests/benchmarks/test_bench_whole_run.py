"""The whole-run grader (issues 26 and 27): it separates dropping the oldest messages from a
mechanism that keeps facts, and it counts a fact lost at any later request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks._data import SWEBENCH_DIR
from benchmarks._whole_run import (
    Recording,
    Retention,
    SentView,
    error_lines_in,
    grade_needed,
    grade_whole_run,
    load_recording,
    names_in,
    norm,
    paths_in,
    view_from_texts,
)
from benchmarks.retention_whole_run import drop_oldest_views

FILLER = "\n".join(f"    value_{i} = compute({i}) + offset  # line {i}" for i in range(60))


def _write_run(tmp_path: Path, steps: int = 14) -> Path:
    """A mini-swe-agent run whose commands come back to the file of five steps before."""
    messages = [
        {"role": "system", "content": "You run one shell command per step."},
        {"role": "user", "content": "Fix the failing tests in src/pkg."},
    ]
    for k in range(steps):
        command = f"grep -n helper_{k} src/pkg/mod_{k}.py"
        if k >= 5:
            command += f" src/pkg/mod_{k - 5}.py && echo helper_{k - 5}"
        messages.append(
            {"role": "assistant", "content": f"THOUGHT: step {k}.\n\n```bash\n{command}\n```"}
        )
        error = f"ValueError: bad value in mod_{k}\n" if k % 3 == 0 else ""
        messages.append(
            {
                "role": "user",
                "content": f"<returncode>1</returncode>\n<output>\n{error}{FILLER}\n</output>",
            }
        )
    path = tmp_path / "synthetic.traj.json"
    path.write_text(json.dumps({"messages": messages}), encoding="utf-8")
    return path


def _paste_everything(recording: Recording, views: list[SentView]) -> list[SentView]:
    """A fake mechanism: drop the oldest, and paste every earlier command and error line
    into a summary."""
    pasted = []
    for view in views:
        lines = []
        for message in recording.before(view.step):
            if message.command is not None:
                lines.append(message.command)
            if message.output is not None:
                lines.extend(error_lines_in(message.output))
        summary = norm("\n".join(lines))
        pasted.append(SentView(view.step, view.context, f"{summary}\x00{view.full}"))
    return pasted


def test_the_rules_read_paths_errors_and_names() -> None:
    command = "cd /testbed && sed -i 's/a/b/' ./django/db/backends/oracle/operations.py"
    assert paths_in(command) == {"django/db/backends/oracle/operations.py"}
    assert paths_in("python -m pytest tests/test_x.py::test_one -k 'not slow'") == {
        "tests/test_x.py"
    }
    output = "  File 'x.py', line 3\n    except ValueError:\nValueError: bad\nE       assert 1 == 2"
    assert error_lines_in(output) == {"ValueError: bad", "E assert 1 == 2"}
    names = names_in("python -m pytest tests/test_x.py::test_one --tb=short -k get_inlines")
    assert {"test_one", "--tb", "get_inlines"} <= names
    assert "pytest" not in names


def test_drop_oldest_scores_clearly_below_a_mechanism_that_keeps_facts(tmp_path: Path) -> None:
    recording = load_recording(_write_run(tmp_path))
    dropped = drop_oldest_views(recording, window=2000)
    pasted = _paste_everything(recording, dropped)
    trivial, keeper = grade_whole_run(recording, dropped), grade_whole_run(recording, pasted)
    assert trivial.compaction_points > 0
    assert trivial.graded["commands"] == keeper.graded["commands"] > 5
    for kind in ("paths", "commands", "error lines"):
        assert keeper.kept_rate(kind) == 1.0
        rate = trivial.kept_rate(kind)
        assert rate is not None
        assert rate < 0.5, (kind, rate)
    needed_trivial, needed_keeper = (
        grade_needed(recording, dropped),
        grade_needed(recording, pasted),
    )
    for kind in ("paths", "names"):
        assert needed_keeper.needed[kind] > 0
        assert needed_keeper.rate(kind) == 1.0
        rate = needed_trivial.rate(kind)
        assert rate is not None
        assert rate < 0.5, (kind, rate)


def test_separates_them_on_recorded_runs() -> None:
    trivial, keeper = Retention(), Retention()
    for name in ("psf__requests-1921", "sphinx-doc__sphinx-9461", "sympy__sympy-13031"):
        recording = load_recording(SWEBENCH_DIR / f"{name}.traj.json")
        dropped = drop_oldest_views(recording)
        trivial.add(grade_whole_run(recording, dropped))
        keeper.add(grade_whole_run(recording, _paste_everything(recording, dropped)))
    for kind in ("paths", "commands", "error lines"):
        assert keeper.kept_rate(kind) == 1.0
    assert (trivial.kept_rate("commands") or 0) < 0.5
    assert (trivial.kept_rate("paths") or 0) < 0.9


def test_a_fact_lost_at_a_later_request_counts_as_lost(tmp_path: Path) -> None:
    recording = load_recording(_write_run(tmp_path, steps=3))
    system, task = recording.raw[0]["content"], recording.raw[1]["content"]
    step1, out1, step2, out2, step3, out3 = (m["content"] for m in recording.raw[2:8])
    first = "grep -n helper_0 src/pkg/mod_0.py"
    full = view_from_texts(1, [system, task, step1, out1])
    # Request 2 drops the first turn but its summary has the command; request 3 drops it too.
    kept = view_from_texts(2, [system, task, step2, out2], [f"ran: {first}"])
    forgotten = view_from_texts(3, [system, task, step2, out2, step3, out3], ["ran something"])
    next_only = grade_whole_run(recording, [full, kept])
    assert next_only.graded["commands"] == 1
    assert next_only.lost["commands"] == 0
    whole = grade_whole_run(recording, [full, kept, forgotten])
    assert whole.graded["commands"] == 1
    assert whole.lost["commands"] == 1
    assert whole.lost["paths"] == 1  # src/pkg/mod_0.py is nowhere in the third request
    assert whole.compaction_points == 1


def test_exact_whitespace_grading_loses_a_command_whose_spaces_were_collapsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``--exact-whitespace`` a command kept with its inner spaces collapsed is lost
    (it no longer runs as typed); one listed line by line with an indent is kept."""
    from benchmarks import _whole_run

    command = "sed -i '3i\\        return x' a.py\npython -c 'print(1)'"
    collapsed = "- sed -i '3i\\ return x' a.py\n  python -c 'print(1)'"
    listed = "- sed -i '3i\\        return x' a.py\n  python -c 'print(1)'"
    fact = _whole_run.norm(command)
    assert _whole_run.present("commands", fact, _whole_run.norm(collapsed))
    monkeypatch.setattr(_whole_run, "EXACT_WHITESPACE", True)
    fact = _whole_run.norm(command)
    assert not _whole_run.present("commands", fact, _whole_run.norm(collapsed))
    assert _whole_run.present("commands", fact, _whole_run.norm(listed))
