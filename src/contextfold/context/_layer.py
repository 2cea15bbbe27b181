"""SummaryLayer: the middle layer of the model input as one typed, portable value.

The summary layer (context-management.zh, section 概述, Overview) is what a compaction
leaves of the history it folded: one or more rendered parts (``LayerConfig(update="append")``
adds a part per compaction, so the prefix a provider cached ends on a part boundary), the
artifact ledger the next compaction merges into, the fields the summarizer wrote, and
where the folded messages were offloaded. Everything that stores, sends or restores the
summary (the engine, the agent's saved state, every framework codec, the gateway) converts
through this type: as a :class:`~contextfold.message.Msg` (:meth:`SummaryLayer.to_msg`,
:meth:`SummaryLayer.from_msg`) or as a JSON document (:meth:`SummaryLayer.to_json`,
:meth:`SummaryLayer.from_json`). No other module reads the keys this one writes into a
message's metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from .._exceptions import MessageFormatError
from ..message import MARKER_KEY, Marker, Msg, TextBlock, marker_of
from ..token import TokenCounter
from ._config import ContextConfig
from ._cut import HeadTailCut
from ._ledger import ArtifactLedger

__all__ = [
    "SUMMARY_NAME",
    "PartBudget",
    "SummaryLayer",
    "is_summary",
    "ledger_budget",
    "request_budget",
    "select_requests",
    "summary_budget",
]

SUMMARY_NAME = "summary"
"""``Msg.name`` of the summary message."""

# The metadata keys of a summary message; read and written here only.
_LEDGER = "ledger"
_FIELDS = "fields"
_REFS = "refs"
_REQUESTS = "requests"
_JSON_VERSION = 1


def is_summary(msg: Msg) -> bool:
    """Whether ``msg`` is a summary layer's message."""
    return marker_of(msg) is Marker.SUMMARY


def summary_budget(config: ContextConfig, size: int) -> int:
    """Tokens the summary layer may take: half the room between reserve and trigger."""
    return max(128, int((config.trigger_ratio - config.reserve_ratio) * size) // 2)


def ledger_budget(config: ContextConfig, size: int, compactions: int = 0) -> int:
    """Tokens the ledger may take after ``compactions`` earlier compactions: ``ledger_ratio``
    of the window, grown by a quarter of it per compaction up to ``ledger_max_ratio``,
    within three quarters of the summary's."""
    layer = config.layer
    ratio = layer.ledger_ratio * (1 + compactions / 4)
    ratio = min(ratio, max(layer.ledger_ratio, layer.ledger_max_ratio))
    return min(int(ratio * size), summary_budget(config, size) * 3 // 4)


def request_budget(config: ContextConfig, size: int) -> int:
    """Tokens the user's earlier messages may take: ``request_ratio`` of the summary's,
    within what the ledger leaves of it."""
    budget = summary_budget(config, size)
    return min(int(config.layer.request_ratio * budget), budget - ledger_budget(config, size))


_REQUEST_CUT = HeadTailCut(marker=" [...] ", marker_room=4)
_LAYER_CUT = HeadTailCut(marker="\n[... summary cut to fit the window ...]\n")
_MIN_REQUEST_ROOM = 32


def select_requests(
    earlier: Sequence[str], new: Sequence[str], counter: TokenCounter, budget: int
) -> tuple[str, ...]:
    """The user's messages kept word for word, oldest first: the newest that fit
    ``budget`` whole; the first that does not is cut to what is left (when that is worth
    keeping) and the older ones are left to the summary."""
    kept: list[str] = []
    room = budget
    for text in reversed([*earlier, *new]):
        tokens = counter.count_text(text)
        if tokens <= room:
            kept.append(text)
            room -= tokens
            continue
        if room >= _MIN_REQUEST_ROOM:
            kept.append(_REQUEST_CUT.cut(counter, text, room, tokens=tokens))
        break
    return tuple(reversed(kept))


@dataclass(frozen=True)
class PartBudget:
    """What a part appended to the summary may take, in tokens."""

    text: int
    """The whole part: what :func:`summary_budget` leaves beside the summary in place."""
    ledger: int
    """Its ledger: what :func:`ledger_budget` leaves beside the facts listed already."""


@dataclass(frozen=True, eq=False)
class SummaryLayer:
    """The summary of the compressed history: its parts in order, the ledger, the
    summarizer's fields and the offload references.

    Immutable: a compaction makes a new layer (:meth:`appended`, or a new one) and the
    engine swaps it in. Two layers are equal when their parts, ledger, fields and
    references are.
    """

    parts: tuple[str, ...]
    """The rendered parts, oldest first; the model sees them as consecutive text blocks."""
    ledger: ArtifactLedger = field(default_factory=ArtifactLedger)
    """Facts of every folded span (files, commands, errors, names), merged per compaction."""
    fields: Mapping[str, Any] | None = None
    """The summarizer's fields: the newest part's, with the earlier values of the fields
    it left empty; ``None`` when no summarizer wrote the layer (a fallback)."""
    refs: tuple[str, ...] = ()
    """Where the folded messages were offloaded, one reference per compaction that had an
    offloader, oldest first."""
    requests: tuple[str, ...] = ()
    """The user's earlier messages the parts show word for word, oldest first
    (:func:`select_requests`)."""

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a summary layer has at least one part")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SummaryLayer):
            return NotImplemented
        return (
            self.parts == other.parts
            and self.ledger == other.ledger
            and _plain(self.fields) == _plain(other.fields)
            and self.refs == other.refs
            and self.requests == other.requests
        )

    __hash__ = None  # type: ignore[assignment]  # fields are a mapping

    # -- as a message -----------------------------------------------------------------

    @cached_property
    def msg(self) -> Msg:
        """The layer as the user-role message the model sees (built once)."""
        return self.to_msg()

    def to_msg(self) -> Msg:
        """A new summary message: one text block per part (a plain string for one part),
        the layer's structure in its metadata."""
        content: str | list[TextBlock] = (
            self.parts[0] if len(self.parts) == 1 else [TextBlock(text=p) for p in self.parts]
        )
        metadata: dict[str, Any] = {
            MARKER_KEY: Marker.SUMMARY.value,
            _LEDGER: self.ledger.model_dump(),
        }
        if self.fields is not None:
            metadata[_FIELDS] = dict(self.fields)
        if self.refs:
            metadata[_REFS] = list(self.refs)
        if self.requests:
            metadata[_REQUESTS] = list(self.requests)
        return Msg(SUMMARY_NAME, content, "user", metadata=metadata)

    @classmethod
    def from_msg(cls, msg: Msg) -> SummaryLayer:
        """The layer a summary message holds; ``msg`` itself stays its :attr:`msg` (same
        id, same cached token counts). A message without the layer's metadata (a summary
        written by an older version, or by hand) becomes a layer of its text parts."""
        if isinstance(msg.content, str):
            parts: tuple[str, ...] = (msg.content,)
        else:
            parts = tuple(b.text for b in msg.content if isinstance(b, TextBlock)) or (msg.text,)
        data = msg.metadata.get(_LEDGER)
        fields = msg.metadata.get(_FIELDS)
        refs = msg.metadata.get(_REFS)
        requests = msg.metadata.get(_REQUESTS)
        layer = cls(
            parts=parts,
            ledger=ArtifactLedger.model_validate(data)
            if isinstance(data, dict)
            else ArtifactLedger(),
            fields=dict(fields) if isinstance(fields, Mapping) else None,
            refs=tuple(r for r in refs if isinstance(r, str)) if isinstance(refs, list) else (),
            requests=tuple(r for r in requests if isinstance(r, str))
            if isinstance(requests, list)
            else (),
        )
        layer.__dict__["msg"] = msg  # the cached_property's slot: keep the caller's message
        return layer

    # -- as a JSON document -------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The layer as a JSON-ready document (``from_json`` reads it back exactly)."""
        return {
            "version": _JSON_VERSION,
            "parts": list(self.parts),
            "ledger": self.ledger.model_dump(mode="json"),
            "fields": None if self.fields is None else dict(self.fields),
            "refs": list(self.refs),
            "requests": list(self.requests),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SummaryLayer:
        """Read a document written by :meth:`to_json`; a malformed one raises
        :class:`~contextfold.MessageFormatError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise MessageFormatError(f"a summary layer is a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != _JSON_VERSION:
            raise MessageFormatError(f"unknown summary layer version {version!r}")
        parts, fields, refs = data.get("parts"), data.get("fields"), data.get("refs", [])
        requests = data.get("requests", [])
        if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
            raise MessageFormatError(
                "a summary layer's 'parts' must be a non-empty list of strings"
            )
        if fields is not None and not isinstance(fields, Mapping):
            raise MessageFormatError("a summary layer's 'fields' must be an object or null")
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise MessageFormatError("a summary layer's 'refs' must be a list of strings")
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise MessageFormatError("a summary layer's 'requests' must be a list of strings")
        try:
            ledger = ArtifactLedger.model_validate(data.get("ledger") or {})
        except ValidationError as exc:
            raise MessageFormatError(f"a summary layer's 'ledger' is malformed: {exc}") from exc
        return cls(
            parts=tuple(parts),
            ledger=ledger,
            fields=None if fields is None else dict(fields),
            refs=tuple(refs),
            requests=tuple(requests),
        )

    @classmethod
    def restore(cls, saved: Mapping[str, Any], parts: Sequence[str]) -> SummaryLayer:
        """The layer a framework's item carried: a :meth:`to_json` document, or (written
        by an earlier version) the summary message's metadata beside the item's ``parts``."""
        if "version" in saved:
            return cls.from_json(saved)
        content: str | list[TextBlock] = (
            parts[0] if len(parts) == 1 else [TextBlock(text=p) for p in parts]
        )
        return cls.from_msg(Msg(SUMMARY_NAME, content, "user", metadata=dict(saved)))

    # -- changes ------------------------------------------------------------------------

    def appended(
        self,
        text: str,
        *,
        ledger: ArtifactLedger,
        fields: Mapping[str, Any] | None,
        ref: str | None,
        requests: Sequence[str] = (),
    ) -> SummaryLayer:
        """This layer with one more part (this one's parts unchanged, word for word) that
        shows ``requests`` besides those shown already."""
        return SummaryLayer(
            parts=(*self.parts, text),
            ledger=ledger,
            fields=fields,
            refs=(*self.refs, ref) if ref else self.refs,
            requests=(*self.requests, *requests),
        )

    def with_note(self, note: str) -> SummaryLayer:
        """This layer with ``note`` appended to its newest part."""
        *earlier, newest = self.parts
        return SummaryLayer(
            parts=(*earlier, f"{newest}\n\n{note}"),
            ledger=self.ledger,
            fields=self.fields,
            refs=self.refs,
            requests=self.requests,
        )

    def cut_by(self, counter: TokenCounter, tokens: int) -> SummaryLayer:
        """This layer with its newest part cut (head and tail kept) by at least ``tokens``,
        and the part before it when the newest cannot give that much (down to its marker):
        the one part of a request the engine may still shorten when what must stay (the
        request in progress, a pending tool exchange) leaves it too little room."""
        before, layer = self.tokens(counter), self
        for index in reversed(range(len(self.parts))):
            layer = layer._part_cut(counter, index, tokens - (before - layer.tokens(counter)))
            if before - layer.tokens(counter) >= tokens:
                break
        return layer

    def _part_cut(self, counter: TokenCounter, index: int, tokens: int) -> SummaryLayer:
        """This layer with part ``index`` cut by at least ``tokens``, or as far as it goes."""
        part, before, want = self.parts[index], self.tokens(counter), tokens
        while True:
            room = max(0, counter.count_text(part) - want)
            parts = list(self.parts)
            parts[index] = _LAYER_CUT.cut(counter, part, room)
            layer = SummaryLayer(
                parts=tuple(parts),
                ledger=self.ledger,
                fields=self.fields,
                refs=self.refs,
                requests=self.requests,
            )
            # A part's tokens do not add up exactly to the layer's as sent (the cut text
            # meets its neighbours differently): 74 asked, 73 given, 3,001 of 3,000.
            short = tokens - (before - layer.tokens(counter))
            if short <= 0 or room == 0:
                return layer
            want += short

    def redacted(self, redact: Callable[[str], str]) -> SummaryLayer:
        """This layer with its parts and the user's messages it shows passed through
        ``redact`` (the rest was written from redacted text already)."""
        return SummaryLayer(
            parts=tuple(redact(p) for p in self.parts),
            ledger=self.ledger,
            fields=self.fields,
            refs=self.refs,
            requests=tuple(redact(r) for r in self.requests),
        )

    # -- budgets ------------------------------------------------------------------------

    def tokens(self, counter: TokenCounter) -> int:
        """The layer's size as sent (cached on its message)."""
        return counter.count_message(self.msg)

    def room_for_part(
        self, config: ContextConfig, size: int, counter: TokenCounter
    ) -> PartBudget | None:
        """What a part appended to this layer may take, or ``None`` when the next
        compaction rewrites it instead: ``LayerConfig(update="rewrite")``, or less than a third
        of the layer's budget (or of the ledger's) left. The layer as a whole stays within
        both budgets, as one rewritten summary does; a ledger a rewrite grew past its own
        budget (into the room the fields left) has the layer's room beside the fields."""
        if config.layer.update != "append":
            return None
        budget = summary_budget(config, size)
        room = budget - self.tokens(counter)
        if room < budget // 3:
            return None
        listed = self.ledger
        ledger = ledger_budget(config, size, listed.compactions)
        if not ledger:
            return PartBudget(text=room, ledger=0)  # no ledger kept
        ledger_room = ledger - (counter.count_text(listed.render()) if listed.entries else 0)
        if ledger_room < 0:
            # A rewrite grew the ledger into the room its fields left, past the ledger's
            # own budget: that room is the ledger's, as it will be at the next rewrite.
            # The part's ledger gets what the fields (as long as the summarizer wrote them
            # last) leave of the layer's room: counted against its own budget alone, the
            # ledger stayed full and every later compaction rewrote the whole layer.
            fields = (self.fields or {}).values()
            written = sum(counter.count_text(_field_text(v)) for v in fields)
            ledger_room = room - written - PART_FRAME
        if ledger_room < ledger // 3:
            return None
        return PartBudget(text=room, ledger=min(ledger_room, room * 3 // 4))


PART_FRAME = 64
"""Tokens of an appended part that are neither fields nor ledger (its heading, the
offload reference, the ledger's title), at least."""


def _field_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _plain(fields: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if fields is None else dict(fields)
