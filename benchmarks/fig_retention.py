"""Figure 4: what survives compression.

For every compression in the replays at ``context_size=16000``, the distinct file paths,
function names, error lines and numbers of the compressed span are looked up (a) in the
summary the model then sees and (b) in the summary plus everything the workspace kept,
which the agent can read back with its file tools. Both systems use the same extractive
summarizer (``contextfold.replay.summarize_items``), so differences come from the
frameworks. The facts are found by this module's own patterns, independent of the
summarizer's, so the summarizer is not graded by its own yardstick.
"""

from __future__ import annotations

import re
from typing import Any

from ._common import Options, RunResult
from ._data import load_swebench
from .fig_overhead import replay_pairs

__all__ = ["FACT_KINDS", "extract_facts", "retention", "run"]

FACT_KINDS = ("paths", "functions", "errors", "numbers")

_PATH = re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w-]+\.[A-Za-z]\w{0,5}\b")
# Definitions, snake_case calls, and the function of each traceback frame.
_FUNC = re.compile(
    r"\b(?:def|class)\s+([A-Za-z_]\w*)|\b([a-z_][a-z0-9]*_[a-z0-9_]+)\(|, in ([A-Za-z_]\w*)$",
    re.M,
)
_ERROR = re.compile(
    r"^\s*((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Warning|Failure)\b:?[^\n]{0,160})", re.M
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def extract_facts(text: str) -> dict[str, list[str]]:
    """Paths, function names, error lines and numbers (3+ characters) found in ``text``."""
    paths = _PATH.findall(text)
    funcs = [a or b or c for a, b, c in _FUNC.findall(text)]
    errors = [e.strip() for e in _ERROR.findall(text) if len(e.strip()) > 8]
    numbers = [n for n in _NUMBER.findall(text) if len(n) >= 3]
    return {"paths": paths, "functions": funcs, "errors": errors, "numbers": numbers}


def retention(runs: list[RunResult]) -> dict[str, tuple[int, int, int]]:
    """Per fact kind: (facts in compressed spans, kept in summary, kept in summary+store)."""
    totals = {k: [0, 0, 0] for k in FACT_KINDS}
    for r in runs:
        for c in r.compressions:
            facts = extract_facts(c.span_text)
            reachable = c.summary_text + "\n" + r.offload_text
            for kind in FACT_KINDS:
                for fact in set(facts[kind]):
                    totals[kind][0] += 1
                    totals[kind][1] += fact in c.summary_text
                    totals[kind][2] += fact in reachable
    return {k: (v[0], v[1], v[2]) for k, v in totals.items()}


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def _rows(label: str, runs: list[RunResult]) -> list[str]:
    res = retention(runs)
    n = sum(len(r.compressions) for r in runs)
    return [
        f"| {label} | {kind} | {n} | {tot} | {_pct(a, tot)} | {_pct(b, tot)} |"
        for kind, (tot, a, b) in res.items()
    ]


async def run(opts: Options) -> str:
    pairs: list[tuple[RunResult, Any]] | None = opts.shared.get("replays16000")
    if pairs is None:
        pairs = await replay_pairs(load_swebench(limit=6 if opts.quick else None), 16000)
    ref_runs = [r for r, _ in pairs]
    ours = [o for _, o in pairs]
    rows = _rows("AgentScope", ref_runs)
    if ours and all(isinstance(o, RunResult) for o in ours):
        rows += _rows("contextfold", ours)
        res = retention(ours)
        tot, a, b = res["paths"]
        target = (
            (
                f"Targets for file paths: (a) >= 95%: {'met' if a / tot >= 0.95 else 'MISSED'}"
                f" ({_pct(a, tot)}); (b) 100%: {'met' if b == tot else 'MISSED'} "
                f"({_pct(b, tot)}).\n"
            )
            if tot
            else "Targets for file paths: not measurable (no paths in compressed spans).\n"
        )
    else:
        note = next((o for o in ours if isinstance(o, str)), "pending")
        rows.append(f"| contextfold | all | {note} | | | |")
        target = "Targets (paths (a) >= 95%, (b) 100%): pending (our side not measurable).\n"
    return (
        "## Figure 4: retention through compression\n\n"
        f"{len(pairs)} recorded runs replayed at context_size=16000; (a) = in the summary, "
        "(b) = in the summary or verbatim in the workspace files the agent can read back "
        "(a plain substring match: what `grep` would find).\n\n"
        "| system | facts | compressions | distinct facts in spans | (a) in summary | "
        "(b) recoverable |\n|---|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n" + target
    )
