"""Redaction of a long text in pieces, off the event loop, to the same result.

:func:`~contextfold.context.redact_credentials` over a 100 MB tool result takes ~3 s, and
one of its calls (a ``lower``, a rule's scan) over the whole text holds the GIL, and so the
event loop, for up to a second even in a worker thread. Here the text is cut at line ends
into pieces of about :data:`PIECE` characters, each redacted by its own call in a worker
thread, so no single call is long; the pieces' results joined equal the whole text's.

A cut must not fall where a secret or its name could straddle it: the rest of a
``Bearer`` value on the next line, ``password =`` then the quoted value on the next line,
a PEM block, or the two lines the named rules look at past their trigger word. Every such
match or span starts at a trigger word (a rule's literal, a named word such as ``pass`` or
``key``) and reaches at most :data:`_REACH` characters past it (two lines of up to
``_LONG`` each and the ``_GAP`` that merges spans), except through a run of whitespace
(``Bearer``, ``name =``) or a PEM block's body, which may be as long as it likes. So a line
end is a cut when the :data:`_REACH` characters before it hold no trigger word (in lower
case), hold something other than whitespace (a whitespace run crossing the cut would start
after it, right behind its trigger word, which would be in reach), and lie outside every
PEM block's candidate match. Anywhere else the piece goes on to a later line end; a text
with no cut (one 100 MB line, a trigger word every few lines) is redacted in one call.

Only the shipped redactor is cut: a redactor of the user's may look across any distance,
so it runs over the whole text in one worker-thread call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

from .._process import run
from ..message import Msg, ToolResultBlock
from ._redact import (
    _AROUND,
    _GAP,
    _LONG,
    _NAMED_TRIGGERS,
    _RULES,
    Redactor,
    redact_credentials,
    redact_messages,
    redact_tool_result,
)

__all__ = [
    "PIECE",
    "apply_edits",
    "redact_in_pieces",
    "redact_in_process",
    "redact_messages_off_loop",
    "redact_tool_result_off_loop",
    "redaction_edits",
]

PIECE = 1 << 18
"""Characters redacted by one call, about: a few milliseconds of scanning."""

_REACH = 2 * _LONG + _GAP + _AROUND[1] + 64
"""How far past its trigger word a rule's match or a named span can reach (whitespace runs
and PEM blocks aside): the word's line and the next, each up to ``_LONG``, the gap that
merges two spans, and some slack for the word's own length."""

_WORDS: tuple[str, ...] = tuple(
    sorted(
        {t.lower() for rule in _RULES for t in rule.triggers}
        | set(_NAMED_TRIGGERS)
        | {"-----begin"}
    )
)
"""Every trigger word in lower case: where one is in reach, no cut."""

_PEM = _RULES[0]
_PEM_WORD = "PRIVATE KEY"
_SCAN = 1 << 18
"""Characters of the lowered text looked through by one call when finding cuts."""


def redact_in_pieces(text: str, *, piece: int = PIECE) -> str:
    """``redact_credentials(text)``, computed a piece of about ``piece`` characters at a
    time (cut only where no match or span can cross; see the module). Synchronous: call it
    in a worker thread. ``text`` itself when nothing was masked."""
    if len(text) <= piece:
        return redact_credentials(text)
    return apply_edits(text, redaction_edits(text, piece), piece=piece)


def redaction_edits(text: str, piece: int = PIECE) -> list[tuple[int, int, str]]:
    """``(start, end, redacted)`` for each piece of ``text`` the redaction changed, in
    order (the pieces as :func:`redact_in_pieces` cuts them)."""
    edits: list[tuple[int, int, str]] = []  # only the pieces that changed are kept
    start = 0
    for end in (*_cuts(text, piece), len(text)):
        part = text[start:end]
        done = redact_credentials(part)
        if done != part:
            edits.append((start, end, done))
        start = end
    return edits


def apply_edits(text: str, edits: Sequence[Sequence[int | str]], *, piece: int = PIECE) -> str:
    """``text`` with each ``(start, end, redacted)`` of ``edits`` put in place (``text``
    itself when there are none)."""
    if not edits:
        return text
    parts: list[str] = []
    at = 0
    for start, end, done in (*edits, (len(text), len(text), "")):
        assert isinstance(start, int)
        assert isinstance(end, int)
        assert isinstance(done, str)
        parts += (text[i : min(i + piece, start)] for i in range(at, start, piece))
        parts.append(done)
        at = end
    return "".join(parts)


def redact_in_process(text: str) -> str:
    """``redact_credentials(text)``, the matching done in a worker process (see
    ``contextfold._process``): the redaction of 100 MB is seconds of ``re`` and Python,
    and a worker thread doing it held the event loop's GIL for over 100 ms at a time on a
    loaded machine. Only the pieces that changed come back. Synchronous: call it in a
    worker thread."""
    if len(text) <= PIECE:
        return redact_credentials(text)
    return apply_edits(text, run(redaction_edits, text))


def _cuts(text: str, piece: int) -> Iterator[int]:
    """Line ends (the index after a ``\\n``) at which ``text`` may be cut, about ``piece``
    characters apart, in order; none within ``piece`` of the end."""
    pem = _pem_blocks(text)
    last_word = -_REACH - 1  # the last trigger word's start seen so far (none: far back)
    last_solid = -1  # the last character that is not whitespace
    seen = 0  # text[:seen] has been looked through
    target = piece
    while target < len(text) - piece:
        at = text.find("\n", target, target + _SCAN)
        if at == -1:
            target += _SCAN
            continue
        cut = at + 1
        while seen < cut:  # look through text[:cut] in bounded pieces
            upto = min(cut, seen + _SCAN)
            lo = max(0, seen - 16)  # a word cut by the previous look
            low = text[lo:upto].lower()
            if len(low) == upto - lo:  # else: positions shift (İ); be conservative
                found = max(low.rfind(w) for w in _WORDS)
                if found != -1:
                    last_word = max(last_word, lo + found)
            else:
                last_word = upto
            solid = len(text[seen:upto].rstrip())
            if solid:
                last_solid = seen + solid - 1
            seen = upto
        if (
            cut - last_word > _REACH
            and last_solid >= cut - _REACH
            and not any(b - _REACH < cut < e + _REACH for b, e in pem)
        ):
            yield cut
            target = cut + piece
        else:  # the first line end that could do
            target = max(cut, last_word + _REACH, *(e + _REACH for b, e in pem if b < cut))


def _pem_blocks(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every match the PEM rule could make (it is the first rule, so
    it sees the text as given): each starts at the ``-----BEGIN`` on the line of a
    ``PRIVATE KEY`` and may run on through any length of base64."""
    blocks: list[tuple[int, int]] = []
    at = 0
    while True:
        at = _find_in_pieces(text, _PEM_WORD, at)
        if at == -1:
            return blocks
        line = text.rfind("\n", 0, at) + 1
        begin = text.rfind("-----BEGIN", line, at)
        if begin != -1:
            match = _PEM.pattern.match(text, begin)
            if match is not None:
                blocks.append((begin, match.end()))
        at += len(_PEM_WORD)


def _find_in_pieces(text: str, word: str, start: int) -> int:
    """``text.find(word, start)``, looking through ``_SCAN`` characters per call."""
    while start < len(text):
        end = min(len(text), start + _SCAN + len(word))
        at = text.find(word, start, end)
        if at != -1 or end == len(text):
            return at
        start = end - len(word) + 1
    return -1


async def _redact_long(texts: list[str], redact: Redactor) -> dict[int, str]:
    """``redact(t)`` for each text over :data:`PIECE` characters in ``texts``, by ``id``:
    in a worker thread (in pieces for the shipped redactor, whole for any other)."""
    done: dict[int, str] = {}
    for text in texts:
        if len(text) > PIECE and id(text) not in done:
            if redact is redact_credentials:
                done[id(text)] = await asyncio.to_thread(redact_in_process, text)
            else:
                done[id(text)] = await asyncio.to_thread(redact, text)
    return done


def _recorder(texts: list[str]) -> Redactor:
    """A redactor that changes nothing and notes each text it is given: run through
    :func:`redact_messages` first, it lists exactly the texts that function redacts."""

    def note(text: str) -> str:
        texts.append(text)
        return text

    return note


def _with(done: dict[int, str], redact: Redactor) -> Redactor:
    def each(text: str) -> str:
        return done[id(text)] if id(text) in done else redact(text)

    return each


async def redact_tool_result_off_loop(block: ToolResultBlock, redact: Redactor) -> ToolResultBlock:
    """:func:`redact_tool_result`, with each long text redacted off the event loop (short
    ones on it, where they cost less than a thread hop)."""
    texts: list[str] = []
    redact_tool_result(block, _recorder(texts))
    done = await _redact_long(texts, redact)
    return redact_tool_result(block, _with(done, redact) if done else redact)


async def redact_messages_off_loop(msgs: Sequence[Msg], redact: Redactor) -> list[Msg]:
    """:func:`redact_messages`, with each long text redacted off the event loop."""
    texts: list[str] = []
    redact_messages(msgs, _recorder(texts))
    done = await _redact_long(texts, redact)
    return redact_messages(msgs, _with(done, redact) if done else redact)
