"""The artifact ledger: facts the next step needs, kept beside the summary's five fields.

Summarizers forget file paths, commands and exact error lines more than anything else, and
an empty or failed summary keeps nothing at all. So the engine extracts, deterministically,
what the compressed messages touched: files, the commands run with their exit status, error
lines, function and class names, identifiers from the user's messages and the user's
constraints. The ledger is merged across chained compactions (an item seen again counts as
used again and as recent), ranked by recency then use, and rendered within a token budget
(``LayerConfig.ledger_ratio`` of the window); what falls out stays in the offloaded
messages, where the read-back tools find it. It rides in the summary message's metadata, so
it survives a fallback to truncation too. The facts are found by :mod:`._facts` (its
:func:`extract_ledger` is re-exported here), which the extractive summarizer shares; this
module merges, ranks, selects and renders them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from ..token import TokenCounter
from ._facts import LedgerKind, extract_ledger

__all__ = ["ArtifactLedger", "LedgerEntry", "LedgerKind", "extract_ledger"]

_ORDER: tuple[LedgerKind, ...] = (
    "constraint",
    "command",
    "edit",
    "file",
    "error",
    "symbol",
    "identifier",
)
"""Rendering order, and the tie-break of ranking (earlier kinds first)."""

_HEADINGS: dict[LedgerKind, str] = {
    "constraint": "The user asked",
    "command": "Commands run (exit status)",
    "edit": "Files changed",
    "file": "Files",
    "error": "Errors seen",
    "symbol": "Functions and classes",
    "identifier": "Identifiers",
}
_INLINE: frozenset[LedgerKind] = frozenset({"edit", "file", "symbol", "identifier"})
"""Kinds rendered as one comma-separated line rather than one item per line."""

_MAX_STORED = 600
"""Entries carried in the summary's metadata at most (beyond the rendered ones, for ranking)."""

_KIND_CAP: dict[LedgerKind, int] = {
    "constraint": 12,
    "edit": 40,
    "symbol": 30,
    "identifier": 20,
}
"""Most entries rendered of the kinds that are context rather than record: past these,
they would crowd out the commands, files and errors the next step needs."""


class LedgerEntry(BaseModel):
    """One fact: what it is, its text, when it was last seen and how often."""

    kind: LedgerKind
    text: str
    last: int = 0
    """The compaction (1, 2, ...) in which the fact was last seen."""
    uses: int = 1
    """In how many compactions the fact was seen."""


class ArtifactLedger(BaseModel):
    """What the compressed history touched; rendered within a token budget."""

    entries: list[LedgerEntry] = []
    compactions: int = 0
    """Compactions merged into this ledger."""

    def merge(self, found: Sequence[tuple[LedgerKind, str]]) -> ArtifactLedger:
        """This ledger with the facts of one more compaction (in order of appearance)."""
        index = self.compactions + 1
        merged: dict[tuple[str, str], LedgerEntry] = {
            (e.kind, e.text): e.model_copy() for e in self.entries
        }
        for kind, text in found:
            key = (kind, text)
            entry = merged.pop(key, None)
            if entry is None:
                entry = LedgerEntry(kind=kind, text=text, last=index, uses=0)
            if entry.last != index or entry.uses == 0:
                entry.uses += 1  # once per compaction: a log repeating a line is no use
            entry.last = index
            merged[key] = entry  # re-inserted: the most recently seen come last
        entries = list(merged.values())
        if len(entries) > _MAX_STORED:
            keep = {id(e) for e in _ranked(entries)[:_MAX_STORED]}
            entries = [e for e in entries if id(e) in keep]
        return ArtifactLedger(entries=entries, compactions=index)

    def is_empty(self) -> bool:
        """True when nothing was found."""
        return not self.entries

    def select(self, counter: TokenCounter, budget: int) -> ArtifactLedger:
        """The best-ranked entries whose rendering fits ``budget`` tokens."""
        chosen: list[LedgerEntry] = []
        used = counter.count_text(_TITLE) + 8
        per_kind: dict[str, int] = {}
        for entry in _ranked(self.entries):
            taken = per_kind.get(entry.kind, 0)
            if taken >= _KIND_CAP.get(entry.kind, budget):
                continue
            cost = counter.count_text(entry.text) + 2
            if not taken:
                cost += counter.count_text(_HEADINGS[entry.kind]) + 3
            if used + cost > budget:
                continue
            chosen.append(entry)
            per_kind[entry.kind] = taken + 1
            used += cost
        order = {id(e): i for i, e in enumerate(self.entries)}
        chosen.sort(key=lambda e: order[id(e)])
        return ArtifactLedger(entries=chosen, compactions=self.compactions)

    def render(self, said: str = "", *, readback: bool = True) -> str:
        """The facts as plain text, grouped by kind, most recently seen last.

        ``said`` is the rest of the summary (the model-written fields): a fact it already
        states verbatim is not repeated, since every repeated token is written to the
        prompt cache again at each compaction. Commands are always listed, for their exit
        status.
        """
        if not self.entries:
            return ""
        commands = [e.text for e in self.entries if e.kind == "command"]
        changed = {e.text for e in self.entries if e.kind == "edit"}
        lines = [_TITLE if readback else _TITLE_NO_READBACK]
        for kind in _ORDER:
            items = [e.text for e in self.entries if e.kind == kind]
            if kind in ("file", "identifier"):
                # Already on the page inside a command line: no need to say it twice.
                items = [t for t in items if not any(t in c for c in commands)]
            if kind == "file":
                items = [t for t in items if t not in changed]
            if said and kind != "command":
                items = [t for t in items if not _stated(t, said)]
            if not items:
                continue
            if kind in _INLINE:
                lines.append(f"{_HEADINGS[kind]}: " + ", ".join(items))
            else:
                lines.append(f"{_HEADINGS[kind]}:")
                lines.extend(f"- {item}" for item in items)
        return "\n".join(lines)


_TITLE = (
    "Facts from the compressed history (kept by the engine; Read or Grep the saved "
    "messages for more):"
)
_TITLE_NO_READBACK = "Facts from the compressed history (kept by the engine):"
"""The title when the model has no read-back tools (shorter: budgets count ``_TITLE``)."""


def _stated(fact: str, text: str) -> bool:
    """Whether ``text`` holds ``fact`` verbatim as a whole item (not inside a longer
    word, name or path)."""
    start = text.find(fact)
    while start >= 0:
        end = start + len(fact)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "_./-") and not (after.isalnum() or after in "_/-"):
            return True
        start = text.find(fact, start + 1)
    return False


_FIRST: dict[LedgerKind, int] = {"edit": 0, "error": 1}
"""Kinds ranked before all others, whenever seen: the files the agent changed and the
errors it met are its work; what it only listed or read is context."""


def _ranked(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """Files the agent changed first, whenever it changed them (they are its work); then
    the most recent compaction first, then most used, then by kind, newest first."""
    indexed = list(enumerate(entries))
    indexed.sort(
        key=lambda p: (
            _FIRST.get(p[1].kind, len(_FIRST)),
            -p[1].last,
            -p[1].uses,
            _ORDER.index(p[1].kind),
            -p[0],
        )
    )
    return [e for _, e in indexed]
