"""Search probes written from text outside the item sought (issue 27, point 5).

The search figure's first probes took their query from the lines around the fact *in the
very item sought*; an agent never has those lines (they are what was compressed away).
These probes take the query from text the agent still has when it searches: the task
statement, or a later turn of the same run that refers back to the fact. The rules were
fixed, and the probe file (``benchmarks/search_probes.json``) written and committed, before
any search was run on them.

Rules (the replay and the items are the search figure's: the 44 SWE-bench runs replayed
through the engine at ``context_size=16000`` into one :class:`MemoryWorkspace`; an item
is one offloaded message, a line of its session's context log, or one tool result):

1. A *fact* is a match, anywhere in an item, of an exception or error name, a file path
   or a function name (the search figure's patterns; numbers are left out: a later turn
   that holds the same 3-digit number rarely refers to the item that printed it).
2. The *target* of a fact is the first item of its run, in the run's message order, whose
   text holds it.
3. The *referring text* is, for source ``later``: the first assistant turn of the run after
   the target's message whose thought or command holds the fact (the agent talking about
   it again); for source ``task``: the run's task statement, when it holds the fact and is
   not itself the target. A fact gives at most one probe per source.
4. The *query* is the up to 8 words (``[A-Za-z][A-Za-z0-9_]{2,}``, without stopwords,
   case-insensitively distinct) of the referring text nearest the fact's first mention
   there (by character distance, earlier first on ties), in their order in the text; the
   fact's own words count. Fewer than 3 words: no probe. A query already used is skipped.
5. A probe is *recalled* when one of the first 5 hits is its target or an item holding the
   same passage (the fact's line in the target with the lines before and after it,
   verbatim), the search figure's rule. *Any item of the run* counts a hit from the same
   run whose text holds the fact.

``python -m benchmarks.search_probes`` rewrites the probe file.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from contextfold.message import Msg
from contextfold.replay import load_recordings, replay_runs
from contextfold.workspace import MemoryWorkspace

from ._data import SWEBENCH_DIR
from .fig_search import item_lines

__all__ = ["PROBE_FILE", "OutsideProbe", "build", "load_probes", "query_near"]

PROBE_FILE = Path(__file__).with_name("search_probes.json")

_FACTS = [
    ("error", re.compile(r"\b\w*(?:Error|Exception|Warning)\b")),
    (
        "path",
        re.compile(r"[\w.\-]*(?:/[\w.\-]+)+|\b[\w\-]+\.(?:py|txt|cfg|toml|rst|json|ya?ml|ini)\b"),
    ),
    ("function", re.compile(r"\b([a-z]+_[a-z_0-9]+|[a-z]+[A-Z]\w*)\(")),
]
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "the and for with that this from are was were not but you your have has had its into "
        "then than there their what when where which while will would should could can may "
        "also just like some such only more most other each any all out use used using one "
        "two new get set see let now how why who our about after before over under again",
    )
)


@dataclass(frozen=True)
class OutsideProbe:
    """A query written from text outside its target item."""

    run: str
    source: str
    """``later`` (a later turn refers back to the fact) or ``task`` (the task statement)."""
    kind: str
    fact: str
    query: str
    path: str
    line: int
    passage: str


def _facts(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, pattern in _FACTS:
        for m in pattern.finditer(text):
            fact = m.group(1) if pattern.groups else m.group()
            if (kind, fact) not in out:
                out.append((kind, fact))
    return out


def _said(msg: Msg) -> str:
    """What an assistant turn says: its thought and its commands (not the JSON around them)."""
    parts = [msg.text]
    for call in msg.tool_calls:
        parts += [str(v) for v in call.input.values()]
    return "\n".join(p for p in parts if p)


def query_near(text: str, fact: str, *, size: int = 8) -> str | None:
    """Rule 4: the ``size`` words of ``text`` nearest ``fact``'s first mention, in order."""
    at = text.find(fact)
    if at < 0:
        return None
    centre = at + len(fact) / 2
    words: dict[str, tuple[float, int, str]] = {}
    for m in _WORD.finditer(text):
        low = m.group().lower()
        if low in _STOP:
            continue
        dist = abs((m.start() + m.end()) / 2 - centre)
        if low not in words or dist < words[low][0]:
            words[low] = (dist, m.start(), m.group())
    chosen = sorted(words.values())[:size]
    if len(chosen) < 3:
        return None
    return " ".join(w for _, _, w in sorted(chosen, key=lambda x: x[1]))


def _passage(text: str, fact: str) -> str:
    lines = [x for x in text.split("\n") if x.strip()]
    for i, line in enumerate(lines):
        if fact in line:
            return "\n".join(lines[max(0, i - 1) : i + 2])
    return fact


async def build() -> list[OutsideProbe]:
    """The probes of the module docstring's rules."""
    runs = load_recordings([SWEBENCH_DIR]).runs
    ws = MemoryWorkspace()
    await ws.initialize()
    await replay_runs(runs, context_size=16000, workspace=ws)
    items = await item_lines(ws)
    # where each offloaded message sits in its run: context lines carry the message's id
    where: dict[str, tuple[str, int]] = {}
    for item in await ws.list_items():
        if item.kind == "context":
            for n, line in enumerate((await ws.read(item.ref)).split("\n")):
                if line:
                    where[Msg.from_json(line).id] = (item.path, n)
    texts = {(path, line): text for path, line, _, text in items}
    probes: list[OutsideProbe] = []
    used: set[str] = set()
    for run, _source in runs:
        msgs = run.messages
        placed = [(i, where[m.id]) for i, m in enumerate(msgs) if m.id in where]
        targets: dict[tuple[str, str], tuple[int, tuple[str, int]]] = {}
        for index, at in placed:
            for found in _facts(texts[at]):
                targets.setdefault(found, (index, at))
        task = msgs[0].text if msgs and msgs[0].role == "user" else ""
        for (kind, fact), (index, at) in targets.items():
            refs: list[tuple[str, str]] = []
            later = next(
                (_said(m) for m in msgs[index + 1 :] if m.role == "assistant" and fact in _said(m)),
                None,
            )
            if later is not None:
                refs.append(("later", later))
            if index != 0 and fact in task:
                refs.append(("task", task))
            for source, text in refs:
                query = query_near(text, fact)
                if query is None or query in used:
                    continue
                used.add(query)
                probes.append(
                    OutsideProbe(
                        run.instance_id,
                        source,
                        kind,
                        fact,
                        query,
                        at[0],
                        at[1],
                        _passage(texts[at], fact),
                    )
                )
    return probes


def load_probes(path: Path = PROBE_FILE) -> list[OutsideProbe]:
    """The committed probe set."""
    return [OutsideProbe(**row) for row in json.loads(path.read_text())]


def main() -> None:  # pragma: no cover - writes the committed file
    probes = asyncio.run(build())
    PROBE_FILE.write_text(json.dumps([asdict(p) for p in probes], indent=0) + "\n")
    by: dict[str, int] = {}
    for p in probes:
        by[f"{p.source}/{p.kind}"] = by.get(f"{p.source}/{p.kind}", 0) + 1
    print(len(probes), "probes", dict(sorted(by.items())))


if __name__ == "__main__":  # pragma: no cover
    main()
