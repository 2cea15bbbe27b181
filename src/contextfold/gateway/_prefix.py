"""What the previous request of a conversation showed, so the next one hashes and counts
only what is new.

An agent resends its whole history every turn. Transparent mode needs, per request, the
chained content digest of the history at a few points (does it still start with what the
state summarized? with what was forwarded last time?) and the request's token count.
Computed from scratch, that is a canonical JSON dump, a SHA-256 and a count lookup per
message: about 11 ms on a 555 KB history, every turn.

Instead, a :class:`Checkpoint` keeps, at a few message boundaries of the previous request
(its end, the few messages before it, whose ``cache_control`` markers clients move, and
the state's cut), the SHA-256 of the client's raw bytes up to there, the content digest
there and the token counts up to there. The next request's raw bytes are hashed in one
pass (about 0.1 ms per 100 KB); where they match, everything before that boundary is the
same content, byte for byte, and only the messages after it are digested and counted.
Nothing here changes what is forwarded: the same digests and counts, computed for less.
A checkpoint is a few hundred bytes, kept in memory only (a restarted gateway computes
the first request of each conversation in full).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

from ._count import Tally
from ._sessions import SessionState, content_digest
from ._wire import ParsedBody

__all__ = ["Chain", "Checkpoint", "Counted", "Known", "Mark", "checkpoint_after", "recall"]

_TAIL = 3
"""Boundaries kept before the end: the last messages are where clients move markers."""


@dataclass(frozen=True)
class Mark:
    """One boundary of the previous request: its first ``index`` messages."""

    index: int
    length: int
    """Characters from the first message's start to the end of message ``index - 1``."""
    raw: bytes
    """SHA-256 of those characters' UTF-8 bytes."""
    digest: str
    """The chained content digest of ``messages[:index]`` (``content_digest``)."""
    client_tokens: int
    """Tokens of ``messages[:index]`` as the client sent them."""
    forwarded_tokens: int | None
    """Tokens of ``messages[cut:index]`` as forwarded (``None`` before the cut)."""


@dataclass(frozen=True)
class Checkpoint:
    """The boundaries of a conversation's previous request, ascending, and what they
    were counted with (the counter; the cut and compaction the forwarded counts assume)."""

    counter: str
    cut: int
    compactions: int
    summary_tokens: int
    """Tokens of the summary message forwarded first (0 when none)."""
    marks: tuple[Mark, ...]


class Chain(Sequence[str]):
    """``chain[i]``: the chained content digest of ``messages[:i]``, as ``_digests`` in
    transparent mode gives it, computed only for the messages after ``start`` (the rest
    known), or in full if an index before it that is not known is asked for."""

    def __init__(self, messages: Sequence[Any], known: dict[int, str], start: int) -> None:
        self._messages = messages
        self._known = known
        self._start = start
        self._tail = [known[start]]
        self._full: list[str] | None = None

    def __len__(self) -> int:
        return len(self._messages) + 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        if index >= self._start:
            while len(self._tail) <= index - self._start:
                at = self._start + len(self._tail) - 1
                self._tail.append(content_digest(self._tail[-1], self._messages[at]))
            return self._tail[index - self._start]
        found = self._known.get(index)
        if found is not None:
            return found
        if self._full is None:
            full = [""]
            for message in self._messages:
                full.append(content_digest(full[-1], message))
            self._full = full
        return self._full[index]


@dataclass
class Known:
    """What a request shares with its conversation's previous one: the longest boundary
    whose bytes match (``mark``), the digests, and the hash state at that boundary."""

    parsed: ParsedBody
    digests: Chain
    checkpoint: Checkpoint | None
    mark: Mark | None
    hasher: Any  # hashlib's SHA-256 object after the matched bytes

    def client_base(self) -> tuple[int, int] | None:
        """``(k, tokens of the client's messages[:k])`` when known."""
        return (self.mark.index, self.mark.client_tokens) if self.mark is not None else None

    def forwarded_base(self, state: SessionState) -> tuple[int, int] | None:
        """``(j, tokens of the forwarded messages[:j])`` when known for ``state``."""
        mark, point = self.mark, self.checkpoint
        if mark is None or point is None or mark.forwarded_tokens is None:
            return None
        if state.cut != point.cut or state.compactions != point.compactions:
            return None
        if mark.index < state.cut:
            return None
        head = 1 if state.summary is not None else 0
        return (mark.index - state.cut + head, mark.forwarded_tokens + point.summary_tokens)


@dataclass(frozen=True)
class Counted:
    """How a forwarded request was counted: the state its messages were built with, the
    client's request's tally and the forwarded request's (before breakpoints)."""

    state: SessionState
    client: Tally
    forwarded: Tally


def _counter_name(counter: Any) -> str:
    return str(getattr(counter, "name", type(counter).__name__))


def recall(parsed: ParsedBody, checkpoint: Checkpoint | None, counter: Any) -> Known | None:
    """What ``parsed`` (a request whose messages are the parsed ones) shares with the
    request ``checkpoint`` was taken from; ``None`` when its messages are not an array
    of objects that can be located."""
    messages = parsed.client_messages
    first = parsed.first
    if messages is None or first is None:
        return None
    hasher = hashlib.sha256()
    at_best = hasher.copy()
    best: Mark | None = None
    if checkpoint is not None and checkpoint.counter == _counter_name(counter):
        pos = 0
        end_of_last = parsed.ends.get(len(messages) - 1)
        for mark in checkpoint.marks:
            if end_of_last is None or mark.index > len(messages):
                break
            if first + mark.length > end_of_last:
                break
            hasher.update(parsed.encoded(first + pos, first + mark.length))
            pos = mark.length
            if hasher.digest() != mark.raw:
                break
            best, at_best = mark, hasher.copy()
        for mark in checkpoint.marks:
            if best is not None and mark.index <= best.index:
                # Identical bytes: the same complete messages end at the same place.
                parsed.learn_end(mark.index - 1, first + mark.length)
    known = {0: ""}
    if checkpoint is not None and best is not None:
        known.update({m.index: m.digest for m in checkpoint.marks if m.index <= best.index})
    start = best.index if best is not None else 0
    return Known(parsed, Chain(messages, known, start), checkpoint, best, at_best)


def checkpoint_after(known: Known, counter: Any, counted: Counted) -> Checkpoint | None:
    """The checkpoint of the request ``known`` describes, once forwarded as ``counted``
    says (the summary first, if any, then the client's messages from the cut)."""
    cut, compactions = counted.state.cut, counted.state.compactions
    summarized = counted.state.summary is not None
    client_tally, tally = counted.client, counted.forwarded
    parsed = known.parsed
    messages = parsed.client_messages
    first = parsed.first
    if messages is None or first is None:
        return None
    n = len(messages)
    wanted = set(range(max(n - _TAIL, 1), n + 1))
    if cut > 0:
        wanted.add(cut)
    indices = sorted(i for i in wanted if isinstance(messages[i - 1], dict))
    if not indices:
        return None
    old = {m.index: m for m in known.checkpoint.marks} if known.checkpoint else {}
    matched = known.mark.index if known.mark is not None else 0
    pos = known.mark.length if known.mark is not None else 0
    hasher = known.hasher.copy() if known.mark is not None else hashlib.sha256()
    head = 1 if summarized else 0
    summary_tokens = tally.count(0) if summarized else 0
    marks: list[Mark] = []
    for index in indices:
        length = parsed.end(index - 1) - first
        previous = old.get(index)
        if index <= matched and previous is not None and previous.length == length:
            raw = previous.raw
        elif length >= pos:
            hasher.update(parsed.encoded(first + pos, first + length))
            pos = length
            raw = hasher.digest()
        else:
            raw = hashlib.sha256(parsed.encoded(first, first + length)).digest()
        forwarded = (
            tally.messages_before(index - cut + head) - summary_tokens if index >= cut else None
        )
        marks.append(
            Mark(
                index=index,
                length=length,
                raw=raw,
                digest=known.digests[index],
                client_tokens=client_tally.messages_before(index),
                forwarded_tokens=forwarded,
            )
        )
    return Checkpoint(_counter_name(counter), cut, compactions, summary_tokens, tuple(marks))
