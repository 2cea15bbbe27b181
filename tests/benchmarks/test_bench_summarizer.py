"""The benchmark harness's shared summarizer and data loader (no AgentScope needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"benchmarks.{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


summarizer = _load("_summarizer")
data = _load("_data")

ITEMS = [
    ("system", "You are an agent."),
    ("user", "Fix the crash in src/app/main.py when the config is empty."),
    ("assistant", "THOUGHT: look at the file\ncat src/app/main.py"),
    (
        "tool",
        'Traceback (most recent call last):\n  File "src/app/main.py", line 120, in load_config\n'
        "KeyError: 'timeout'",
    ),
    ("assistant", "THOUGHT: the key is missing; patch parse_header() next."),
]


def test_summary_has_the_five_fields() -> None:
    fields = summarizer.summarize(ITEMS)
    assert set(fields) == {
        "task_overview",
        "current_state",
        "important_discoveries",
        "next_steps",
        "context_to_preserve",
    }


def test_summary_is_deterministic() -> None:
    assert summarizer.summarize(ITEMS) == summarizer.summarize(list(ITEMS))


def test_task_overview_is_the_first_user_request() -> None:
    assert summarizer.summarize(ITEMS)["task_overview"].startswith("Fix the crash")


def test_summary_keeps_paths_errors_and_functions() -> None:
    text = "\n".join(summarizer.summarize(ITEMS).values())
    assert "src/app/main.py" in text
    assert "KeyError: 'timeout'" in text
    assert "load_config" in text
    assert "parse_header" in text


def test_previous_summary_task_is_carried_over() -> None:
    previous = (
        "<system-info>Summary\n# Task overview\nShip version 2 of the parser.\n\n"
        "# Current state\nnothing</system-info>"
    )
    fields = summarizer.summarize([("user", previous), ("assistant", "ok")])
    assert fields["task_overview"] == "Ship version 2 of the parser."


def test_extract_facts_finds_each_kind() -> None:
    facts = summarizer.extract_facts(ITEMS[3][1] + "\ndef compute_hash(x): return 4096")
    assert "src/app/main.py" in facts["paths"]
    assert "compute_hash" in facts["functions"]
    assert any(e.startswith("KeyError") for e in facts["errors"])
    assert "4096" in facts["numbers"]


def test_swebench_sessions_load_with_their_steps() -> None:
    sessions = data.load_swebench()
    assert len(sessions) == 44
    assert all(s.steps and s.task for s in sessions)


def test_synthetic_session_has_the_requested_size() -> None:
    assert data.synthetic_session(1000).n_messages == 1000
