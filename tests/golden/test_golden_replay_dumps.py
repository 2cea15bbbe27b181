"""The request dumps of ``contextfold replay`` on the 44 recorded SWE-bench runs, at 16k
and 32k with the ``none`` and ``extractive`` summarizers, are what they were.

The digests were recorded on fc7b2cc before the engine was restructured (issue 25); the
``none`` dumps are byte-identical to fc7b2cc. The ``extractive`` dumps changed once, on
purpose, when the extractive summarizer took its errors, files and functions from the
ledger's extractor (one extractor, issue 25 point 4): 36 of 44 runs at 16k and 13 of 44 at
32k (those that compact). Then once more when the user's request in progress stopped
being folded (issue 26): the task of each run stays in the context, verbatim, after every
compaction. Then when the user's earlier messages stayed word for word in the summary
layer (``LayerConfig.request_ratio``): the runs where a user message other than the task
(mini-swe-agent's format reminder) became the request in progress, so that the task was
folded and is now shown word for word in the summary (22 of 44 at 16k with ``none``, 21
with ``extractive``, 11 and 11 at 32k). Then when the ledger ranked the files the agent
changed and the errors it met before what it only read (issue 26): 36, 11, 13 and 6 runs
(16k none, 16k extractive, 32k none, 32k extractive). Then when the ledger listed commands
as typed (lines, not " ; "; heredoc bodies counted), a rerun once with its statuses, said
how many commands it left out, capped errors, left out what the kept user messages state,
and grew its budget with the run (issue 26): 36, 36, 13 and 13 runs, every run that
compacts; then when a short heredoc body (3 lines, 160 characters at most) stayed as
written and the ledger grew to ``ledger_max_ratio=0.25``: 11, 11, 5 and 5 runs. Then
when the ledger kept what the agent ran over the whole run (issue 26: heredoc bodies and
long lines as written, outlined oldest first when room is short; commands ranked after
edits and errors; ``ledger_ratio`` 0.2; a rewrite's ledger grown into the room the fields
leave): 36, 36, 13 and 13 runs. Then when the heredoc bodies the agent wrote outranked
the files it only read, and the extractive summary stopped listing bare numbers: 4, 36, 0
and 13 runs. Then when a long inline script was outlined like a heredoc body and the
bodies came back shortest first: 2, 3, 1 and 1 runs. The compression prompt states the
time, whose tokens decide where a few requests are cut: it is fixed here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import contextfold.context._plan as plan
from contextfold.cli._replay import replay

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"
DIGESTS = Path(__file__).parent / "replay_digests.json"
CONFIGS = [(16000, "none"), (16000, "extractive"), (32000, "none"), (32000, "extractive")]


def dump_digests(out: Path, context_size: int, summarizer: str) -> dict[str, str]:
    """Replay every run, dumping each request as sent; a digest per run's dump."""
    app = typer.Typer(add_completion=False)
    app.command()(replay)
    app.command("unused")(lambda: None)  # two commands: the first is addressed by name
    args = ["replay", str(RUNS), "-c", str(context_size), "-s", summarizer]
    result = CliRunner().invoke(app, [*args, "--dump-requests", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.glob("*.jsonl"))
    }


@pytest.mark.slow
@pytest.mark.parametrize(("context_size", "summarizer"), CONFIGS)
def test_replay_request_dumps_are_unchanged(
    context_size: int, summarizer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "current_time", lambda: "2026-12-01 12:00:00 UTC")
    expected = json.loads(DIGESTS.read_text())[f"{context_size}-{summarizer}"]
    found = dump_digests(tmp_path, context_size, summarizer)
    assert len(found) == 44
    changed = sorted(name for name, digest in found.items() if expected.get(name) != digest)
    assert changed == [], f"{len(changed)} dumps changed, first: {changed[:3]}"


if __name__ == "__main__":  # python -m tests.golden.test_golden_replay_dumps: record anew
    import tempfile

    plan.current_time = lambda: "2026-12-01 12:00:00 UTC"  # type: ignore[assignment]
    recorded = {}
    for size, name in CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            recorded[f"{size}-{name}"] = dump_digests(Path(tmp), size, name)
    DIGESTS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
