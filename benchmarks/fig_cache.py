"""Figure 5: prompt-cache prefix stability.

Each request of a replay is rendered the same neutral way for both systems (tool schemas,
then each message's role and texts) and counted in o200k tokens; the share of its tokens
that equal the previous request's prefix is what a provider's prompt cache could reuse.
A request that keeps less than 99% of the previous one broke the cache mid-way (a
compression, or a change early in the request); a replaced hint at the very end does not.
"""

from __future__ import annotations

import itertools
from typing import Any

from . import _agentscope as agentscope_side
from . import _contextfold as contextfold_side
from ._common import Options, Pending, o200k_count
from ._data import load_swebench, synthetic_session

__all__ = ["prefix_shares", "run"]


def _common_chars(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on prefix equality: fast on long strings
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefix_shares(requests: list[str]) -> list[tuple[float, float]]:
    """For each request after the first: (share of its tokens in the previous request's
    prefix, share of the previous request's tokens that the new one keeps as prefix).

    The second number tells a cache break in the middle of a request (everything after it
    is re-processed) from one at its very end (an ephemeral hint that is replaced).
    """
    counts = [o200k_count(r) for r in requests]
    out = []
    for i, (prev, cur) in enumerate(itertools.pairwise(requests)):
        c = _common_chars(prev, cur)
        # On a cut, the token that straddles it may differ, so it is not counted.
        shared = counts[i] if c == len(prev) else max(0, o200k_count(cur[:c]) - 1)
        total, before = counts[i + 1], counts[i]
        out.append((shared / total if total else 1.0, shared / before if before else 1.0))
    return out


def _row(label: str, shares: list[tuple[float, float]]) -> str:
    if not shares:
        return f"| {label} | n/a | | | |"
    reuse = [a for a, _ in shares]
    kept = sum(1 for _, b in shares if b >= 0.99) / len(shares)
    mean = sum(reuse) / len(reuse)
    worst = 100 * min(reuse)
    return f"| {label} | {len(reuse)} | {100 * mean:.1f}% | {100 * kept:.1f}% | {worst:.1f}% |"


async def _ours(sessions: list[Any], context_size: int) -> list[tuple[float, float]] | str:
    shares: list[tuple[float, float]] = []
    for s in sessions:
        try:
            r = await contextfold_side.run_session(s, context_size=context_size, record=True)
        except Pending as exc:
            return f"pending: {exc}"
        except Exception as exc:
            return f"failed: {type(exc).__name__}: {exc}"
        shares += prefix_shares(r.requests)
    return shares


async def run(opts: Options) -> str:
    groups = [
        ("recorded runs, context_size=16000", load_swebench(limit=4 if opts.quick else 12), 16000),
        ("synthetic 1,000 messages, no compression", [synthetic_session(1000)], 1_000_000),
    ]
    rows = []
    for label, sessions, cs in groups:
        ref: list[tuple[float, float]] = []
        for s in sessions:
            r = await agentscope_side.run_session(s, context_size=cs, record=True)
            ref += prefix_shares(r.requests)
        rows.append(_row(f"{label}: AgentScope", ref))
        ours = await _ours(sessions, cs)
        rows.append(
            _row(f"{label}: contextfold", ours)
            if isinstance(ours, list)
            else f"| {label}: contextfold | {ours} | | | |"
        )
    return (
        "## Figure 5: prompt-cache prefix stability\n\n"
        "| replay: system | requests | mean share of tokens reusable from the previous request "
        "| requests keeping >= 99% of the previous request as prefix | worst |\n"
        "|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )
