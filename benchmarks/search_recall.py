"""Recall@5 on the probes written from outside the item sought (issue 27, point 5).

Three searchers over the same items (the 44 runs replayed at ``context_size=16000`` into
one :class:`MemoryWorkspace`, searched across all sessions), graded by
:mod:`benchmarks.search_probes`' rule 5:

- **ours**: the workspace's ``search(query, limit=10)`` (SQLite FTS5, BM25);
- **grep, any word**: every item holding at least one query word (case-insensitive
  substring), ranked by how many distinct query words it holds, then by how many times they
  occur, then by item order: what a skeptic tries first;
- **grep, all words**: the items holding every query word, ranked by occurrences;
- **ours, the fact alone**: the workspace's search with the fact as the query (an agent
  that remembers the exact name needs no surrounding words).

``python -m benchmarks.search_recall [--runs N]`` prints the table (``--runs`` keeps the
first N runs' sessions and probes).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextfold.replay import load_recordings, replay_runs
from contextfold.workspace import MemoryWorkspace

from ._data import SWEBENCH_DIR
from .fig_search import item_lines
from .search_probes import _WORD, OutsideProbe, load_probes

__all__ = ["Item", "Recall", "grep_rank", "measure", "recalled", "table"]

Item = tuple[str, int, str]
"""``(path, line, text)`` of one offloaded item (line 0 for a tool result)."""


def _lines(text: str) -> str:
    return "\n".join(x for x in text.split("\n") if x.strip())


def recalled(
    top: Sequence[tuple[str, int]], probe: OutsideProbe, texts: dict[tuple[str, int], str]
) -> bool:
    """Rule 5: one of ``top`` is the target or holds the target's passage verbatim."""
    return any(
        where == (probe.path, probe.line) or probe.passage in texts.get(where, "") for where in top
    )


def grep_rank(query: str, items: Sequence[Item], *, every: bool) -> list[tuple[str, int]]:
    """The trivial searcher: items holding the query words, most words then most hits first."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    scored = []
    for order, (path, line, text) in enumerate(items):
        low = text.lower()
        held = [w for w in words if w in low]
        if not held or (every and len(held) < len(words)):
            continue
        scored.append((-len(held), -sum(low.count(w) for w in held), order, (path, line)))
    scored.sort()
    return [where for *_, where in scored]


@dataclass
class Recall:
    """Recall@5 of one searcher, overall and by source and kind."""

    name: str
    hits: dict[tuple[str, str], list[bool]]
    any_item: list[bool]

    def rate(self, source: str | None = None, kind: str | None = None) -> float:
        got = [
            x
            for (s, k), xs in self.hits.items()
            if source in (None, s) and kind in (None, k)
            for x in xs
        ]
        return sum(got) / len(got) if got else float("nan")


def _grade(
    name: str,
    probes: Sequence[OutsideProbe],
    rank: Callable[[OutsideProbe], list[tuple[str, int]]],
    texts: dict[tuple[str, int], str],
) -> Recall:
    out = Recall(name, {}, [])
    for probe in probes:
        top = rank(probe)[:5]
        out.hits.setdefault((probe.source, probe.kind), []).append(recalled(top, probe, texts))
        run_dir = probe.path.rsplit("/", 1)[0]
        out.any_item.append(
            any(w[0].startswith(run_dir) and probe.fact in texts.get(w, "") for w in top)
        )
    return out


async def measure(runs_limit: int | None = None) -> tuple[list[Recall], int, int]:
    """Recall of each searcher, the number of probes and of items."""
    runs = load_recordings([SWEBENCH_DIR]).runs[:runs_limit]
    names = {r.instance_id for r, _ in runs}
    probes = [p for p in load_probes() if p.run in names]
    ws = MemoryWorkspace()
    await ws.initialize()
    await replay_runs(runs, context_size=16000, workspace=ws)
    raw = await item_lines(ws)
    items: list[Item] = [(path, line, text) for path, line, _, text in raw]
    texts = {(path, line): _lines(text) for path, line, text in items}

    async def ours(query: str) -> list[tuple[str, int]]:
        try:
            hits = await ws.search(query, limit=10)
        except ValueError:  # no searchable word (a fact such as ``/2``): the agent gets none
            return []
        return [(h.path, h.offset if h.kind == "context" else 0) for h in hits]

    got_ours = {p.query: await ours(p.query) for p in probes}
    got_fact = {p.fact: await ours(p.fact) for p in probes}
    recalls = [
        _grade(
            "ours (workspace `search`, the probe query)", probes, lambda p: got_ours[p.query], texts
        ),
        _grade(
            "grep, any query word (ranked by words held, then hits)",
            probes,
            lambda p: grep_rank(p.query, items, every=False),
            texts,
        ),
        _grade(
            "grep, all query words (ranked by hits)",
            probes,
            lambda p: grep_rank(p.query, items, every=True),
            texts,
        ),
        _grade("ours, the fact alone as the query", probes, lambda p: got_fact[p.fact], texts),
    ]
    return recalls, len(probes), len(items)


def table(recalls: Sequence[Recall], n_probes: int, n_items: int) -> str:
    """The markdown table of the figure."""
    head = (
        f"{n_probes} probes over {n_items} items.\n\n"
        "| searcher | recall@5 | later turn | task statement | error | function | path | "
        "any item of the run holding the fact |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for r in recalls:
        rows.append(
            f"| {r.name} | **{r.rate():.1%}** | {r.rate('later'):.1%} | {r.rate('task'):.1%} | "
            f"{r.rate(kind='error'):.1%} | {r.rate(kind='function'):.1%} | "
            f"{r.rate(kind='path'):.1%} | {sum(r.any_item) / len(r.any_item):.1%} |"
        )
    return head + "\n".join(rows) + "\n"


def main() -> None:  # pragma: no cover - the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=None, help="first N runs only")
    args = parser.parse_args()
    t0 = time.perf_counter()
    recalls, n, m = asyncio.run(measure(args.runs))
    print(table(recalls, n, m))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()
