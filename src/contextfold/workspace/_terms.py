"""Code-aware terms for ranked search, the same for every backend's engine.

The engines (SQLite FTS5, PostgreSQL full-text search) rank; what they rank is decided
here, so a query means the same on every backend. A word such as ``parser_module``,
``getUserName``, ``src/parser/lexer.py`` or ``Foo.parse_args`` is indexed whole *and* in
its parts: ``src/parser/lexer.py`` gives ``srcparserlexerpy``, ``src``, ``parser``,
``lexer``, ``py``; ``parse_args`` gives ``parseargs``, ``parse``, ``args``;
``getUserName`` gives ``getusername``, ``get``, ``user``, ``name``. Every term is
lower-case letters and digits only, so each engine's own tokenizer keeps it as one token.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "MAX_DOC_CHARS",
    "MAX_QUERY_LENGTH",
    "MAX_QUERY_TERMS",
    "TERMS_VERSION",
    "index_terms",
    "index_terms_text",
    "message_parts",
    "message_text",
    "query_terms",
    "snippet",
]

MAX_QUERY_LENGTH = 1_000
"""Longest query, in characters, that ``search`` accepts."""
MAX_QUERY_TERMS = 32
"""Most distinct terms a query is searched with (the first ones are kept)."""
MAX_DOC_CHARS = 2_000_000
"""Characters of one item that are indexed; the rest of a huge tool result is not."""
TERMS_VERSION = 1
"""Bumped with any change to what ``index_terms`` gives: the SQLite index recomputes a
document's terms to delete it, so an index written under other terms is built again."""

_PIECE = 1 << 16
_BLANK = re.compile(r"\s")
_WORD = re.compile(r"\w+(?:[./\\:\-]+\w+)*")
_SEPARATORS = re.compile(r"[./\\:\-]+")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+|[^\W\d_]+")
_MAX_TERM = 64
_NON_ALNUM = re.compile(r"[\W_]+")
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        "a an and are as at be but by for from has have i if in into is it its of on or so "
        "such that the their then there these this to was we were what when where which while "
        "who will with you",
    )
)


def _norm(word: str) -> str:
    return _NON_ALNUM.sub("", word.lower())[:_MAX_TERM]


def _pieces(word: str) -> Iterable[str]:
    """The whole word, then each part: path segments, ``_`` parts, camelCase parts."""
    parts = [p for p in _SEPARATORS.split(word) if p]
    if len(parts) > 1:
        yield word
    for part in parts:
        subs = [s for s in part.split("_") if s]
        if len(subs) > 1:
            yield part
        for sub in subs:
            camel = _CAMEL.findall(sub)
            if len(camel) > 1:
                yield sub
            yield from camel


@functools.lru_cache(maxsize=65_536)
def _word_terms(word: str) -> tuple[str, ...]:
    # Words repeat a lot (names, paths, log lines): each is split once.
    out = []
    for piece in _pieces(word):
        term = _norm(piece)
        if len(term) >= 2 and term not in _STOPWORDS:
            out.append(term)
    return tuple(out)


def _terms(text: str) -> Iterable[str]:
    for word in _WORD.findall(text):
        yield from _word_terms(word)


def index_terms(text: str) -> list[str]:
    """The terms a document is indexed under, in order, repeats kept (they weigh)."""
    out: list[str] = []
    for piece in _piece_terms(text):
        out.extend(piece)
    return out


def index_terms_text(text: str) -> str:
    """``" ".join(index_terms(text))``, joined a piece at a time: one join of the 2.6
    million terms of a 2M-character document held the GIL for 50 ms."""
    return " ".join(" ".join(piece) for piece in _piece_terms(text) if piece)


def _piece_terms(text: str) -> Iterator[list[str]]:
    """The terms of ``text[:MAX_DOC_CHARS]``, a piece of about 64K characters at a time."""
    # One list extended word by word: a generator's yield per term was two thirds of
    # indexing a long offload.
    # Found a piece at a time (cut at a blank, which no word holds): one findall over 2M
    # characters held the GIL, and so the event loop, for 100 ms.
    end = min(len(text), MAX_DOC_CHARS)
    start = 0
    while start < end:
        stop = end
        if start + _PIECE < end:
            blank = _BLANK.search(text, start + _PIECE, end)
            stop = blank.start() if blank else end
        out: list[str] = []
        extend = out.extend
        for word in _WORD.findall(text, start, stop):
            extend(_word_terms(word))
        yield out
        start = stop


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query; ``ValueError`` when it is too long or has none."""
    if not isinstance(query, str) or len(query) > MAX_QUERY_LENGTH:
        size = len(query) if isinstance(query, str) else 0
        raise ValueError(
            f"the search query is {size:,} characters long, over the limit of "
            f"{MAX_QUERY_LENGTH:,}; use a few distinctive words"
        )
    terms = list(dict.fromkeys(_terms(query)))[:MAX_QUERY_TERMS]
    if not terms:
        raise ValueError(
            f"the search query {query[:80]!r} has no searchable words; use a few distinctive "
            "words, names or paths"
        )
    return terms


def message_text(line: str) -> str:
    """The searchable text of one context-log line (a ``Msg`` as JSON): its texts,
    thinking, tool calls with their arguments and tool results; the raw line if it is not
    a message."""
    try:
        data = json.loads(line)
    except ValueError:
        return line
    if not isinstance(data, dict):
        return line
    return "\n".join(p for p in message_parts(data) if p)


def message_parts(data: dict[str, Any]) -> list[str]:
    """The texts of a parsed message, in order (``message_text`` joins the non-empty ones)."""
    content = data.get("content")
    if isinstance(content, str):
        return [content]
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "thinking":
            parts.append(str(block.get("thinking", "")))
        elif kind == "hint":
            parts.append(str(block.get("hint", "")))
        elif kind == "tool_call":
            args = json.dumps(block.get("input", {}), ensure_ascii=False)
            parts.append(f"{block.get('name', '')} {args}")
        elif kind == "tool_result":
            output = block.get("output")
            if isinstance(output, str):
                parts.append(output)
            elif isinstance(output, list):
                parts.extend(str(b.get("text", "")) for b in output if isinstance(b, dict))
    return parts


_SNIPPET_CHARS = 240
_SNIPPET_SCAN = 1_000_000


def snippet(text: str, terms: list[str]) -> str:
    """About 240 characters of ``text`` around the densest run of query terms, each match
    in ``**bold**``; the start of the text when none occurs verbatim."""
    text = text[:_SNIPPET_SCAN]
    spans: list[tuple[int, int, str]] = []
    if terms:
        alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
        # Terms are normalized (lower-case, no separators), so match them inside words.
        for m in re.finditer(alternatives, text, re.IGNORECASE):
            spans.append((m.start(), m.end(), m.group().lower()))
            if len(spans) >= 2_000:
                break
    start = 0
    if spans:
        best = -1
        j = 0
        for i, (s, _, _) in enumerate(spans):
            while spans[j][0] < s - _SNIPPET_CHARS // 2:
                j += 1
            window = {t for a, _, t in spans[j : i + 1]}
            if len(window) > best:
                best, start = len(window), max(0, spans[j][0] - 40)
    end = min(len(text), start + _SNIPPET_CHARS)
    out: list[str] = []
    pos = start
    for s, e, _ in spans:
        if s < start or e > end:
            continue
        out.append(text[pos:s])
        out.append(f"**{text[s:e]}**")
        pos = e
    out.append(text[pos:end])
    body = " ".join("".join(out).split())
    return f"{'…' if start > 0 else ''}{body}{'…' if end < len(text) else ''}"
