"""Retention over the whole run and needed-fact coverage (issues 26 and 27).

Every request each system sends while replaying the 44 recorded SWE-bench runs at a
16,000-token window is graded by ``_whole_run``'s rules (written from the recordings, not
from contextfold's ledger). Rows:

* contextfold ``none`` and ``extractive``: the requests ``contextfold replay PATH -c 16000
  -s none|extractive --dump-requests DIR`` writes (OpenAI wire JSONL; CLI defaults
  otherwise, so tool results are cut above 50,000 tokens only);
* **drop oldest**, the trivial strategy: the system prompt and the newest recorded messages
  whose tokens (``counter_for_model("gpt-4o")``, reply priming included) fit the window less
  contextfold's default 5% output reserve; no summary;
* AgentScope 2.0.11 (when installed), through ``_agentscope``'s replay harness and its
  request capture, with its default ``ContextConfig`` and the summary fields written empty
  (``none``) or by contextfold's extractive ``summarize_items`` (``extractive``).

Run: ``python -m benchmarks.retention_whole_run [--json PATH] [--limit N] [--no-agentscope]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._data import REPO_ROOT, SWEBENCH_DIR, Session, load_swebench
from ._whole_run import (
    NEEDED_KINDS,
    RETENTION_KINDS,
    Coverage,
    Recording,
    Retention,
    SentView,
    grade_needed,
    grade_whole_run,
    load_recording,
    view_from_texts,
)
from .fig_retention import wire_text

__all__ = [
    "WINDOW",
    "Row",
    "contextfold_views",
    "drop_oldest_views",
    "grade_row",
    "main",
    "table",
]

WINDOW = 16_000
RESERVE = 0.05
"""The output reserve the drop-oldest strategy leaves (contextfold's default
``reserve_ratio``), so both fill the same room."""


_CF_NOTES = {
    "none": "empty summary fields: what the request keeps is the engine's own fact list",
    "extractive": "contextfold's deterministic extractive summarizer",
}
_AS_NOTE = (
    "default ContextConfig; the summary fields written by the named summarizer from the "
    "harness's flattened (role, text) items; one more request per run (its final answer)"
)


@dataclass
class Row:
    """One system's grades summed over the runs."""

    system: str
    summarizer: str
    runs: int = 0
    retention: Retention = field(default_factory=Retention)
    coverage: Coverage = field(default_factory=Coverage)
    seconds: float = 0.0
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        r, c = self.retention, self.coverage
        return {
            "system": self.system,
            "summarizer": self.summarizer,
            "runs": self.runs,
            "requests": r.requests,
            "compaction_points": r.compaction_points,
            "retention": {
                k: {
                    "graded": r.graded[k],
                    "lost": r.lost[k],
                    "lost_at_first_request": r.lost_first[k],
                    "kept_rate": r.kept_rate(k),
                    "request_checks": r.checks[k],
                    "request_misses": r.misses[k],
                    "lost_examples": r.examples.get(k, [])[:8],
                }
                for k in RETENTION_KINDS
            },
            "needed": {
                k: {
                    "needed": c.needed[k],
                    "covered": c.covered[k],
                    "rate": c.rate(k),
                    "missed_examples": c.examples.get(k, [])[:8],
                }
                for k in NEEDED_KINDS
            },
            "seconds": round(self.seconds, 1),
            "note": self.note,
        }


def grade_row(row: Row, recording: Recording, views: Sequence[SentView]) -> None:
    """Grade one run's requests into ``row``."""
    row.runs += 1
    row.retention.add(grade_whole_run(recording, views))
    row.coverage.add(grade_needed(recording, views))


# --- contextfold: the CLI's request dumps -------------------------------------------------


def contextfold_views(dump: Path) -> list[SentView]:
    """The reasoning requests of one ``--dump-requests`` file (OpenAI form)."""
    views: list[SentView] = []
    for line in dump.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["kind"] != "reasoning":
            continue
        messages = item["messages"]
        s0, s1 = item["layers"]["summary"]
        summary = [wire_text(m) for m in messages[s0:s1]]
        kept = [wire_text(m) for i, m in enumerate(messages) if not s0 <= i < s1]
        views.append(view_from_texts(item["step"], kept, summary))
    return views


def replay_dumps(paths: Sequence[Path], summarizer: str, out: Path) -> None:
    """``contextfold replay`` over ``paths`` into ``out`` (this checkout's ``src``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "contextfold.cli", "replay", *map(str, paths)]
    command += ["-c", str(WINDOW), "-s", summarizer, "--dump-requests", str(out), "-q"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"contextfold replay failed ({done.returncode}): {done.stderr[-2000:]}")


# --- the trivial strategy: drop the oldest messages ---------------------------------------


def drop_oldest_views(recording: Recording, window: int = WINDOW) -> list[SentView]:
    """The system prompt and the newest recorded messages that fit, before each turn."""
    from contextfold.token import OpenAITokenCounter, counter_for_model

    counter = counter_for_model("gpt-4o")
    assert isinstance(counter, OpenAITokenCounter)  # it counts wire messages
    budget = int(window * (1 - RESERVE))
    system, rest = recording.raw[0], recording.raw[1:]
    base = counter.count_openai_messages([system])
    empty = counter.count_openai_messages([])
    sizes = [counter.count_openai_messages([m]) - empty for m in rest]
    views: list[SentView] = []
    for step in range(len(recording.assistant_at)):
        end = recording.assistant_at[step]
        start, total = end, base
        while start > 0 and total + sizes[start - 1] <= budget:
            total += sizes[start - 1]
            start -= 1
        while start < end and counter.count_openai_messages([system, *rest[start:end]]) > budget:
            start += 1
        kept = [system["content"], *(m["content"] for m in rest[start:end])]
        views.append(view_from_texts(step, kept))
    return views


# --- AgentScope: its harness's request capture --------------------------------------------


_EMPTY = dict.fromkeys(
    (
        "task_overview",
        "current_state",
        "important_discoveries",
        "next_steps",
        "context_to_preserve",
    ),
    "",
)


def _agentscope_summarize(name: str) -> Any:
    async def empty(items: list[tuple[str, str]], previous: str | None) -> dict[str, str]:
        return dict(_EMPTY)

    async def extract(items: list[tuple[str, str]], previous: str | None) -> dict[str, str]:
        from contextfold.context import summarize_items

        head = [("user", previous)] if previous else []
        return {k: str(v) for k, v in summarize_items(head + items).items()}

    return empty if name == "none" else extract


async def agentscope_views(session: Session, summarizer: str) -> list[SentView]:
    """AgentScope's reasoning requests for one run, as its harness captured them."""
    from . import _agentscope

    result = await _agentscope.run_session(
        session,
        context_size=WINDOW,
        record=True,
        tool_result_limit=50_000,
        summarize=_agentscope_summarize(summarizer),
    )
    return [
        view_from_texts(step, [rest], [summary] if summary else [])
        for step, (summary, rest, _calls) in enumerate(result.extra["sent"])
    ]


# --- the table ----------------------------------------------------------------------------


def _pct(numerator: int, denominator: int) -> str:
    return "n/a" if denominator == 0 else f"{100 * numerator / denominator:.1f}%"


def table(rows: Sequence[Row], *, runs: int) -> str:
    """The Markdown report: regime, whole-run retention, needed-fact coverage."""
    head = (
        f"Window {WINDOW:,} tokens (`counter_for_model('gpt-4o')`), {runs} recorded SWE-bench "
        f"Verified runs (`{SWEBENCH_DIR.relative_to(REPO_ROOT)}`, mini-swe-agent, Gemini 3 Pro), "
        "rules in `benchmarks/_whole_run.py`.\n\n"
        "### Whole-run retention: facts of compressed messages, in every later request\n\n"
        "Each cell: kept % (lost / graded). A fact is lost if any request from its "
        "compression on lacks it.\n\n"
        "| system | summarizer | runs | requests | compaction points | "
        + " | ".join(RETENTION_KINDS)
        + " |\n|---|---|---:|---:|---:|"
        + "---:|" * len(RETENTION_KINDS)
        + "\n"
    )
    lines = []
    for row in rows:
        r = row.retention
        cells = [
            f"{_pct(r.graded[k] - r.lost[k], r.graded[k])} ({r.lost[k]}/{r.graded[k]})"
            for k in RETENTION_KINDS
        ]
        lines.append(
            f"| {row.system} | {row.summarizer} | {row.runs} | {r.requests} | "
            f"{r.compaction_points} | " + " | ".join(cells) + " |"
        )
    first = (
        "\n\nThe same facts graded in the one request where each was first compressed only "
        "(the old reading): kept % (lost / graded).\n\n"
        "| system | summarizer | "
        + " | ".join(RETENTION_KINDS)
        + " |\n|---|---|"
        + "---:|" * len(RETENTION_KINDS)
        + "\n"
    )
    for row in rows:
        r = row.retention
        cells = [
            f"{_pct(r.graded[k] - r.lost_first[k], r.graded[k])} ({r.lost_first[k]}/{r.graded[k]})"
            for k in RETENTION_KINDS
        ]
        first += f"| {row.system} | {row.summarizer} | " + " | ".join(cells) + " |\n"
    needed = (
        "\n### Needed-fact coverage at compaction points\n\n"
        "Facts of the agent's next 3 commands it had met before the compaction, in the "
        "request. Each cell: covered % (missed / needed).\n\n"
        "| system | summarizer | compaction points | paths | names |\n|---|---|---:|---:|---:|\n"
    )
    for row in rows:
        c = row.coverage
        cells = [
            f"{_pct(c.covered[k], c.needed[k])} ({c.needed[k] - c.covered[k]}/{c.needed[k]})"
            for k in NEEDED_KINDS
        ]
        needed += (
            f"| {row.system} | {row.summarizer} | {row.retention.compaction_points} | "
            + " | ".join(cells)
            + " |\n"
        )
    notes = "".join(f"\n- {row.system} {row.summarizer}: {row.note}" for row in rows if row.note)
    return head + "\n".join(lines) + first + needed + (f"\nNotes:{notes}\n" if notes else "")


async def run(*, limit: int | None, agentscope: bool) -> tuple[list[Row], int]:
    paths = sorted(SWEBENCH_DIR.glob("*.traj.json"))[:limit]
    recordings = {p.name.removesuffix(".traj.json"): load_recording(p) for p in paths}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="retention-whole-run-") as tmp:
        for summarizer in ("none", "extractive"):
            row = Row("contextfold", summarizer, note=_CF_NOTES[summarizer])
            start = time.perf_counter()
            out = Path(tmp) / summarizer
            replay_dumps(paths, summarizer, out)
            for name, recording in recordings.items():
                grade_row(row, recording, contextfold_views(out / f"{name}.jsonl"))
            row.seconds = time.perf_counter() - start
            rows.append(row)
    row = Row("drop oldest", "none", note=f"window less {RESERVE:.0%} reserve, no summary")
    start = time.perf_counter()
    for recording in recordings.values():
        grade_row(row, recording, drop_oldest_views(recording))
    row.seconds = time.perf_counter() - start
    rows.append(row)
    if agentscope:
        rows.extend(await _agentscope_rows(recordings))
    return rows, len(recordings)


async def _agentscope_rows(recordings: dict[str, Recording]) -> list[Row]:
    try:
        from . import _agentscope  # noqa: F401 - raises when AgentScope is not installed
    except ImportError as exc:
        return [Row("AgentScope", "-", note=f"not run: {exc}")]
    logging.getLogger("as").setLevel(logging.WARNING)  # AgentScope logs every compression
    sessions = {s.name: s for s in load_swebench()}
    rows = []
    for summarizer in ("none", "extractive"):
        row = Row(f"AgentScope {_agentscope_version()}", summarizer, note=_AS_NOTE)
        start = time.perf_counter()
        for name, recording in recordings.items():
            grade_row(row, recording, await agentscope_views(sessions[name], summarizer))
        row.seconds = time.perf_counter() - start
        rows.append(row)
    return rows


def _agentscope_version() -> str:
    from ._agentscope import VERSION

    return str(VERSION)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--limit", type=int, help="grade only the first N runs")
    parser.add_argument("--no-agentscope", action="store_true", help="skip AgentScope's rows")
    args = parser.parse_args(argv)
    rows, runs = asyncio.run(run(limit=args.limit, agentscope=not args.no_agentscope))
    print(table(rows, runs=runs))
    if args.json:
        report = {
            "window": WINDOW,
            "reserve_for_drop_oldest": RESERVE,
            "data": str(SWEBENCH_DIR.relative_to(REPO_ROOT)),
            "runs": runs,
            "rows": [row.as_json() for row in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
