"""The request dumps of ``contextfold replay`` on the 44 recorded SWE-bench runs, at 16k
and 32k with the ``none`` and ``extractive`` summarizers, are what they were.

The digests were recorded on fc7b2cc before the engine was restructured (issue 25); the
``none`` dumps are byte-identical to fc7b2cc. The ``extractive`` dumps changed once, on
purpose, when the extractive summarizer took its errors, files and functions from the
ledger's extractor (one extractor, issue 25 point 4): 36 of 44 runs at 16k and 13 of 44 at
32k (those that compact). Then once more when the user's request in progress stopped
being folded (issue 26): the task of each run stays in the context, verbatim, after every
compaction. The compression prompt's time stamp is blanked.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"
DIGESTS = Path(__file__).parent / "replay_digests.json"
_TIME = re.compile(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")
CONFIGS = [(16000, "none"), (16000, "extractive"), (32000, "none"), (32000, "extractive")]


def dump_digests(out: Path, context_size: int, summarizer: str) -> dict[str, str]:
    """Replay every run, dumping each request as sent; a digest per run's dump."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from contextfold.cli import main; main()",
            "replay",
            str(RUNS),
            "-c",
            str(context_size),
            "-s",
            summarizer,
            "--dump-requests",
            str(out),
            "-q",
        ],
        check=True,
        capture_output=True,
    )
    return {
        path.name: hashlib.sha256(_TIME.sub(b"<time>", path.read_bytes())).hexdigest()
        for path in sorted(out.glob("*.jsonl"))
    }


@pytest.mark.slow
@pytest.mark.parametrize(("context_size", "summarizer"), CONFIGS)
def test_replay_request_dumps_are_unchanged(
    context_size: int, summarizer: str, tmp_path: Path
) -> None:
    expected = json.loads(DIGESTS.read_text())[f"{context_size}-{summarizer}"]
    found = dump_digests(tmp_path, context_size, summarizer)
    assert len(found) == 44
    changed = sorted(name for name, digest in found.items() if expected.get(name) != digest)
    assert changed == [], f"{len(changed)} dumps changed, first: {changed[:3]}"
