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

import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from ..token import TokenCounter
from ._facts import LedgerKind, extract_ledger, outline

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
_SHOWN_INSIDE: frozenset[LedgerKind] = frozenset({"file", "identifier"})
"""Kinds :meth:`ArtifactLedger.render` leaves out when a listed command shows them."""

_MAX_STORED = 600
"""Entries carried in the summary's metadata at most (beyond the rendered ones, for ranking)."""

_KIND_CAP: dict[LedgerKind, int] = {
    "constraint": 12,
    "edit": 40,
    "symbol": 30,
    "identifier": 20,
    "error": 40,
}
"""Most entries rendered of the kinds that are context rather than record: past these,
they would crowd out the commands, files and errors the next step needs. Errors rank
first, so without a cap one failing test run (fifty ``ERROR test_x`` lines) would take the
whole budget from the commands."""

_STATUS = re.compile(r"^\[([^\]]*)\] ")
"""A command's exit status prefix: ``[0] ``, ``[1, 0] `` (the statuses of its runs)."""
_STATUSES = 3
"""Most statuses shown per command (the latest runs')."""


class LedgerEntry(BaseModel):
    """One fact: what it is, its text, when it was last seen and how often."""

    kind: LedgerKind
    text: str
    last: int = 0
    """The compaction (1, 2, ...) in which the fact was last seen."""
    uses: int = 1
    """In how many compactions the fact was seen."""
    count: int = 1
    """How often it was seen in all (a command: how often it was run)."""
    outlined: bool = False
    """A command listed with its long heredoc bodies counted, not written out: the
    ledger lacked room for them (:meth:`ArtifactLedger.select` decides)."""


class ArtifactLedger(BaseModel):
    """What the compressed history touched; rendered within a token budget."""

    entries: list[LedgerEntry] = []
    compactions: int = 0
    """Compactions merged into this ledger."""
    dropped: int = 0
    """Commands :meth:`select` left out for want of room (they stay in the saved
    messages; the rendering says how many)."""

    def merge(self, found: Sequence[tuple[LedgerKind, str]]) -> ArtifactLedger:
        """This ledger with the facts of one more compaction (in order of appearance)."""
        index = self.compactions + 1
        merged: dict[tuple[str, str], LedgerEntry] = {
            _key(e.kind, e.text): e.model_copy() for e in self.entries
        }
        for kind, text in found:
            key = _key(kind, text)
            entry = merged.pop(key, None)
            if entry is None:
                entry = LedgerEntry(kind=kind, text=text, last=index, uses=0, count=0)
            ran = True
            if entry.count and kind == "command":
                entry.text, ran = _rerun(entry.text, text)
            if entry.last != index or entry.uses == 0:
                entry.uses += 1  # once per compaction: a log repeating a line is no use
            entry.count += ran
            entry.last = index
            merged[key] = entry  # re-inserted: the most recently seen come last
        entries = list(merged.values())
        dropped = self.dropped
        if len(entries) > _MAX_STORED:
            keep = {id(e) for e in _ranked(entries)[:_MAX_STORED]}
            dropped += sum(e.kind == "command" and id(e) not in keep for e in entries)
            entries = [e for e in entries if id(e) in keep]
        return ArtifactLedger(entries=entries, compactions=index, dropped=dropped)

    def is_empty(self) -> bool:
        """True when nothing was found."""
        return not self.entries

    def select(self, counter: TokenCounter, budget: int, stated: str = "") -> ArtifactLedger:
        """The best-ranked entries whose rendering fits ``budget`` tokens: the files
        changed, the errors met and the commands run (in outline), then the heredoc bodies
        and inline scripts the agent wrote (shortest first, then newest), then what it
        only read or named.

        Facts other than commands that ``stated`` holds verbatim (the user's messages the
        summary keeps word for word) are left out: the request already shows them."""
        chosen: list[LedgerEntry] = []
        used = counter.count_text(_TITLE) + 8
        # Commands are chosen in outline; their heredoc bodies come back below, newest
        # first, as far as the room left allows.
        entries = [
            e.model_copy(update={"outlined": outline(e.text) != e.text})
            if e.kind == "command"
            else e
            for e in self.entries
        ]
        commands = [e.text for e in entries if e.kind == "command"]
        if commands:
            used += counter.count_text(_dropped_line(99_999, readback=True)) + 2  # its room
        per_kind: dict[str, int] = {}
        dropped = self.dropped

        def take(entry: LedgerEntry) -> None:
            nonlocal used, dropped
            taken = per_kind.get(entry.kind, 0)
            cost = counter.count_text(_listed(_item(entry))) + 1
            if not taken:
                cost += counter.count_text(_HEADINGS[entry.kind]) + 3
            if taken >= _KIND_CAP.get(entry.kind, budget) or used + cost > budget:
                dropped += entry.kind == "command"
                return
            chosen.append(entry)
            per_kind[entry.kind] = taken + 1
            used += cost

        order = {id(e): i for i, e in enumerate(entries)}
        context: list[LedgerEntry] = []  # what the agent only read or named: chosen last
        for entry in _ranked(entries):
            if stated and entry.kind != "command" and _stated(entry.text, stated):
                continue
            if entry.kind not in _FIRST:
                context.append(entry)
                continue
            take(entry)
        # What the agent wrote (heredoc bodies, inline scripts) is its work: it comes back
        # before the files and names it only read or mentioned take the room left. The
        # shortest first (then the newest): each body listed is one whole step of the
        # record, and one long body (a whole file rewritten) took the room of several
        # short ones.
        extras = {
            id(e): counter.count_text(_listed(_item(e, whole=True)))
            - counter.count_text(_listed(_item(e)))
            for e in chosen
            if e.outlined
        }
        outlined = [e for e in chosen if e.outlined]
        for entry in sorted(outlined, key=lambda e: (extras[id(e)], -e.last, -order[id(e)])):
            extra = extras[id(entry)]
            if used + extra <= budget:
                entry.outlined = False
                used += extra
        shown = [_item(e) for e in chosen if e.kind == "command"]
        for entry in context:
            if entry.kind in _SHOWN_INSIDE and any(entry.text in c for c in shown):
                chosen.append(entry)  # the rendering leaves it out: it costs nothing
                continue
            take(entry)
        chosen.sort(key=lambda e: order[id(e)])
        return ArtifactLedger(entries=chosen, compactions=self.compactions, dropped=dropped)

    def render(self, said: str = "", *, readback: bool = True) -> str:
        """The facts as plain text, grouped by kind, most recently seen last.

        ``said`` is the rest of the summary (the model-written fields): a fact it already
        states verbatim is not repeated, since every repeated token is written to the
        prompt cache again at each compaction. Commands are always listed, for their exit
        status.
        """
        if not self.entries:
            return ""
        commands = [_item(e) for e in self.entries if e.kind == "command"]
        changed = {e.text for e in self.entries if e.kind == "edit"}
        lines = [_TITLE if readback else _TITLE_NO_READBACK]
        for kind in _ORDER:
            items = [_item(e) for e in self.entries if e.kind == kind]
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
                if kind == "command" and self.dropped:
                    lines.append(f"- {_dropped_line(self.dropped, readback=readback)}")
                lines.extend(_listed(item) for item in items)
        return "\n".join(lines)


def _key(kind: str, text: str) -> tuple[str, str]:
    """What makes two facts the same: a command run again is the same command, whatever
    its exit status."""
    if kind == "command":
        match = _STATUS.match(text)
        if match is not None:
            return (kind, text[match.end() :])
    return (kind, text)


def _rerun(seen: str, again: str) -> tuple[str, bool]:
    """A command's text after it is seen again: the statuses of its latest runs, oldest
    first (a repeat of the last one is not repeated), then the command; and whether this
    is one more run. A command written in the text (status ``?``) and the run of it are one
    run."""
    old, new = _STATUS.match(seen), _STATUS.match(again)
    if old is None or new is None:
        return again, True
    command = again[new.end() :]
    statuses = old.group(1).split(", ")
    if new.group(1) == "?":  # written out, not run: the status stands
        return f"[{old.group(1)}] {command}", False
    if statuses[-1] == "?":
        statuses[-1] = new.group(1)
        return f"[{', '.join(statuses)}] {command}", False
    if statuses[-1] != new.group(1):
        statuses = [*statuses, new.group(1)][-_STATUSES:]
    return f"[{', '.join(statuses)}] {command}", True


def _item(entry: LedgerEntry, *, whole: bool = False) -> str:
    """One entry as listed: a command in outline when it is outlined (unless ``whole``),
    and saying how often it ran when more than once."""
    if entry.kind != "command":
        return entry.text
    text = outline(entry.text) if entry.outlined and not whole else entry.text
    return f"{text} (run {entry.count} times)" if entry.count > 1 else text


def _listed(item: str) -> str:
    """An item as a list line: the lines of a multi-line command indented under its
    first."""
    return "- " + item.replace("\n", "\n  ")


def _dropped_line(count: int, *, readback: bool) -> str:
    """The line that says how many earlier commands are left out, and where they are."""
    where = ": Search the saved messages for them" if readback else ""
    return f"({count} earlier commands left out{where})"


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


_FIRST: dict[LedgerKind, int] = {"edit": 0, "error": 1, "command": 2}
"""Kinds ranked before all others, whenever seen: the files the agent changed and the
errors it met are its work, and the commands it ran are the record of its steps (each
names the files and functions it touched); what it only listed, read or named is
context."""


def _ranked(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """Files the agent changed first, whenever it changed them (they are its work), then
    the errors it met and the commands it ran; within each, and for the rest, the most
    recent compaction first, then most used, then by kind, newest first."""
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
