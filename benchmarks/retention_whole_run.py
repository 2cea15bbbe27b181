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
  request capture, configured as its context page documents
  (https://docs.agentscope.io/v2/building-blocks/context: ``ContextConfig()`` passed at
  construction, a workspace as offloader; ``tool_result_limit`` at its default 50,000),
  its summary written from the span's messages as the agent holds them (tool calls as
  tool calls) by contextfold's ``extractive_summary`` or by the trivial paste summarizer
  (``_trivial``).

Every summary is capped at the same budget: contextfold's own summary-layer budget at the
window (6,000 tokens at 16k); the paste row is also run at 10% of the window (1,600
tokens: the ledger's first budget until ``ledger_ratio`` became 0.2).

Run: ``python -m benchmarks.retention_whole_run [--json PATH] [--limit N] [--no-agentscope]
[--exact-whitespace]``
(the AgentScope rows need ``pip install agentscope==2.0.11``, best in a separate venv).
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

from . import _whole_run
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
_AS_NOTES = {
    "extractive": "ContextConfig() as documented, LocalWorkspace offloader; contextfold's "
    "extractive summarizer reads the span's real tool calls and results",
    "paste": "ContextConfig() as documented; the trivial summarizer (benchmarks/_trivial.py) "
    "pastes the span's commands and error-grep lines into the summary slot, newest kept",
}


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
    budget: int = 0
    """The summary cap in tokens (0: none, no summary)."""
    max_summary: int = 0
    """The largest summary any request carried, in o200k tokens."""

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
            "summary_budget": self.budget,
            "max_summary_tokens": self.max_summary,
            "seconds": round(self.seconds, 1),
            "note": self.note,
        }


def grade_row(
    row: Row, recording: Recording, views: Sequence[SentView], summaries: Sequence[str] = ()
) -> None:
    """Grade one run's requests into ``row``; ``summaries``: the summary texts sent."""
    row.max_summary = max([row.max_summary, *(_count(t) for t in set(summaries) if t)])
    row.runs += 1
    row.retention.add(grade_whole_run(recording, views))
    row.coverage.add(grade_needed(recording, views))


# --- contextfold: the CLI's request dumps -------------------------------------------------


def contextfold_views(dump: Path, summaries: list[str] | None = None) -> list[SentView]:
    """The reasoning requests of one ``--dump-requests`` file (OpenAI form); the summary
    layer's text of each is appended to ``summaries`` when given."""
    views: list[SentView] = []
    for line in dump.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["kind"] != "reasoning":
            continue
        messages = item["messages"]
        s0, s1 = item["layers"]["summary"]
        summary = [wire_text(m) for m in messages[s0:s1]]
        kept = [wire_text(m) for i, m in enumerate(messages) if not s0 <= i < s1]
        if summaries is not None:
            summaries.append("\n".join(summary))
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


def summary_budget(window: int = WINDOW) -> int:
    """contextfold's summary-layer budget at ``window`` (half the room between its default
    reserve and trigger: 6,000 tokens at 16k), the cap every system's summary gets here."""
    from contextfold.context import ContextConfig

    config = ContextConfig()
    return max(128, int((config.trigger_ratio - config.reserve_ratio) * window) // 2)


def _count(text: str) -> int:
    from contextfold.token import counter_for_model

    return counter_for_model("gpt-4o").count_text(text)


def cap_fields(fields: dict[str, str], template: str, budget: int) -> dict[str, str]:
    """``fields`` with the longest one cut from its head until the rendered summary fits."""
    fields = dict(fields)
    while _count(template.format(**fields)) > budget:
        longest = max(fields, key=lambda k: len(fields[k]))
        if not fields[longest]:
            break
        fields[longest] = fields[longest][len(fields[longest]) // 5 + 1 :]
    return fields


def _agentscope_summarize(name: str, budget: int) -> Any:
    """A ``summarize_msgs`` for AgentScope's harness: the span's messages as AgentScope
    holds them, converted block for block (tool calls stay tool calls)."""
    from contextfold.context import extractive_summary

    from . import _agentscope
    from ._trivial import HEADING, paste_lines, paste_summary, previous_pasted

    template = _agentscope._TEMPLATE
    empty = dict.fromkeys(_SUMMARY_FIELDS, "")

    async def extract(span: list[Any], previous: str | None) -> dict[str, str]:
        fields = extractive_summary(_agentscope.to_contextfold(span), previous=previous)
        return cap_fields({k: str(v) for k, v in fields.items()}, template, budget)

    async def paste(span: list[Any], previous: str | None) -> dict[str, str]:
        msgs = _agentscope.to_contextfold(span)
        calls = [
            b.input.get("command", "") for m in msgs for b in m.blocks() if b.type == "tool_call"
        ]
        outs = [b.text() for m in msgs for b in m.blocks() if b.type == "tool_result"]
        room = budget - _count(template.format(**empty)) - _count(HEADING)
        text = paste_summary(previous_pasted(previous), paste_lines(calls, outs), room, _count)
        return {**empty, "context_to_preserve": text}

    return extract if name == "extractive" else paste


_SUMMARY_FIELDS = (
    "task_overview",
    "current_state",
    "important_discoveries",
    "next_steps",
    "context_to_preserve",
)


async def agentscope_views(
    session: Session, summarizer: str, budget: int, summaries: list[str] | None = None
) -> list[SentView]:
    """AgentScope's reasoning requests for one run, as its harness captured them, with its
    documented defaults (``ContextConfig()``: ``tool_result_limit`` 50,000) and a
    ``LocalWorkspace`` offloader."""
    from . import _agentscope

    result = await _agentscope.run_session(
        session,
        context_size=WINDOW,
        record=True,
        tool_result_limit=50_000,
        summarize_msgs=_agentscope_summarize(summarizer, budget),
    )
    sent = result.extra["sent"]
    if summaries is not None:
        summaries.extend(summary for summary, _rest, _calls in sent)
    return [
        view_from_texts(step, [rest], [summary] if summary else [])
        for step, (summary, rest, _calls) in enumerate(sent)
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
        "| system | summarizer | summary cap / max sent | runs | requests | compaction points | "
        + " | ".join(RETENTION_KINDS)
        + " |\n|---|---|---:|---:|---:|---:|"
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
        cap = f"{row.budget:,} / {row.max_summary:,}" if row.budget else "- / 0"
        lines.append(
            f"| {row.system} | {row.summarizer} | {cap} | {row.runs} | {r.requests} | "
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
            row.budget = summary_budget()
            for name, recording in recordings.items():
                texts: list[str] = []
                views = contextfold_views(out / f"{name}.jsonl", texts)
                grade_row(row, recording, views, texts)
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
    full, ledger = summary_budget(), int(0.1 * WINDOW)
    for summarizer, budget in (("extractive", full), ("paste", full), ("paste", ledger)):
        label = summarizer if budget == full else f"{summarizer} @{budget:,}"
        row = Row(f"AgentScope {_agentscope_version()}", label, note=_AS_NOTES[summarizer])
        row.budget = budget
        start = time.perf_counter()
        for name, recording in recordings.items():
            texts: list[str] = []
            views = await agentscope_views(sessions[name], summarizer, budget, texts)
            grade_row(row, recording, views, texts)
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
    parser.add_argument(
        "--exact-whitespace",
        action="store_true",
        help="compare texts as sent, and a command line by line exactly as typed",
    )
    args = parser.parse_args(argv)
    if args.exact_whitespace:
        os.environ["CONTEXTFOLD_BENCH_EXACT_WHITESPACE"] = "1"
        _whole_run.EXACT_WHITESPACE = True
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
