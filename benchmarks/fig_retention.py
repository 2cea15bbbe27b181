"""Figure 4: what survives compression.

For every compression in the replays at ``context_size=16000``, the distinct file paths,
function names, error lines and numbers of the compressed span are looked up (a) in the
summary the model then sees and (b) in the summary plus everything the workspace kept,
which the agent can read back with its file tools. Both systems use the same extractive
summarizer (``benchmarks/_summarizer.py``), so differences come from the frameworks.
"""

from __future__ import annotations

from typing import Any

from ._common import Options, RunResult
from ._data import load_swebench
from ._summarizer import FACT_KINDS, extract_facts
from .fig_overhead import replay_pairs

__all__ = ["retention", "run"]


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
