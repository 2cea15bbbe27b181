"""The searchable text of context-log lines, without parsing a huge line in one call.

Indexing a line takes its message's text (``message_text``), which parses the line as
JSON. A line holding a 100 MB tool result made that one ``json.loads`` of 100 MB (0.2 s
holding the GIL, so the event loop too, though it ran in a worker thread), to index only
its first ``MAX_DOC_CHARS`` characters. A line over ``HUGE_LINE`` bytes is therefore read
by its skeleton: its strings over ``_BIG`` bytes are found a window at a time (checked to
be valid JSON strings on the way) and replaced by placeholders, the small rest is parsed,
and only as much of each large string is decoded as the text needs. The text is the same
as ``message_text`` gives, cut to ``limit`` characters; a line the skeleton cannot stand
for (a placeholder inside a tool call's arguments, a surrogate pair cut by a window) is
parsed whole, as before.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

from .._process import run
from ._terms import message_parts, message_text

__all__ = ["HUGE_LINE", "huge_line_text", "line_texts"]

HUGE_LINE = 1 << 20
"""Lines longer than this (bytes) are read by their skeleton, in a worker process
(``contextfold._process``)."""

_BIG = 1 << 16
_WINDOW = 1 << 16
# The body of a JSON string as json.loads accepts it (no raw control characters, only
# valid escapes): it stops at the closing quote, or before anything else.
_BODY = re.compile(rb'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*')
_QUOTE, _BACKSLASH = 0x22, 0x5C


def line_texts(payload: bytes | list[bytes], limit: int) -> Iterator[str]:
    """``message_text`` of each line of ``payload`` (bytes, or in pieces: a line may span
    several; a last line without newline included), decoded with invalid UTF-8 replaced;
    a line over ``HUGE_LINE`` bytes gives only its text's first ``limit`` characters."""
    for parts, size in _lines(payload if isinstance(payload, list) else [payload]):
        if size <= HUGE_LINE:
            yield message_text(b"".join(parts).decode("utf-8", "replace"))
        else:  # scanning 100 MB here held this GIL: its pieces go to a worker process
            text: str = run(huge_line_text, parts, limit)
            yield text


def _lines(chunks: list[bytes]) -> Iterator[tuple[list[memoryview], int]]:
    """Each line of ``chunks`` as views of its parts, and its length; never joined."""
    line: list[memoryview] = []
    size = 0
    for chunk in chunks:
        view, pos, end = memoryview(chunk), 0, len(chunk)
        while pos < end:
            stop = _find(chunk, b"\n", pos, end)
            if stop == -1:
                line.append(view[pos:end])
                size += end - pos
                break
            line.append(view[pos:stop])
            yield line, size + stop - pos
            line, size = [], 0
            pos = stop + 1
    if line:
        yield line, size


def huge_line_text(line: bytes, limit: int) -> str:
    """The first ``limit`` characters of ``message_text`` of one huge ``line`` (found from
    its skeleton; parsed whole when the skeleton cannot stand for it)."""
    text = _huge_text(line, 0, len(line), limit)
    if text is None:
        text = message_text(line.decode("utf-8", "replace"))[:limit]
    return text


def _find(raw: bytes, what: bytes, pos: int, end: int) -> int:
    """``raw.find(what, pos, end)``, a window at a time."""
    while pos < end:
        stop = min(end, pos + _WINDOW)
        found = raw.find(what, pos, stop)
        if found != -1:
            return found
        pos = stop
    return -1


def _string_end(raw: bytes, pos: int, end: int) -> int:
    """The closing quote of the JSON string whose body starts at ``pos``; -1 when the
    body is not valid JSON (json.loads would refuse the line) or does not end."""
    while pos < end:
        stop = min(end, pos + _WINDOW)
        pos = _BODY.match(raw, pos, stop).end()  # type: ignore[union-attr]  # always matches
        if pos == stop:
            continue
        if raw[pos] == _QUOTE:
            return pos
        if raw[pos] == _BACKSLASH and pos + 6 > stop and stop < end:
            continue  # an escape cut by the window: matched again from its backslash
        return -1
    return -1


def _huge_text(raw: bytes, start: int, end: int, limit: int) -> str | None:
    token = f"cfbig{uuid.uuid4().hex}n"
    skeleton: list[bytes] = []
    size = 0
    big: dict[str, tuple[int, int]] = {}
    pos = start
    while pos < end:
        quote = _find(raw, b'"', pos, end)
        if (end if quote == -1 else quote) - pos > HUGE_LINE:
            return None  # not a few large strings: parse it whole
        if quote == -1:
            skeleton.append(raw[pos:end])
            size += end - pos
            break
        close = _string_end(raw, quote + 1, end)
        if close == -1:
            return None
        if close - quote - 1 > _BIG:
            key = f"{token}{len(big)}"
            big[key] = (quote + 1, close)
            piece = raw[pos:quote] + b'"' + key.encode() + b'"'
        else:
            piece = raw[pos : close + 1]
        skeleton.append(piece)
        size += len(piece)
        if size > HUGE_LINE:
            return None  # not a few large strings: parse it whole
        pos = close + 1
    try:
        data = json.loads(b"".join(skeleton).decode("utf-8", "replace"))
    except ValueError:
        data = None
    if not isinstance(data, dict):  # message_text gives the line itself
        return raw[start : min(end, start + 4 * (limit + 1))].decode("utf-8", "replace")[:limit]
    out: list[str] = []
    length = 0
    for part in message_parts(data):
        if not part:
            continue
        if out:
            out.append("\n")
            length += 1
        if part in big:
            a, b = big[part]
            text = _string_prefix(raw, a, b, max(0, limit - length))
            if text is None:
                return None
            part = text
        elif token in part:
            return None  # a large string inside a tool call's arguments: re-encoded there
        out.append(part)
        length += len(part)
        if length >= limit:
            break
    return "".join(out)[:limit]


def _string_prefix(raw: bytes, start: int, end: int, count: int) -> str | None:
    """The first ``count`` characters of the JSON string body ``raw[start:end]`` (valid,
    see ``_BODY``), decoded a window at a time."""
    out: list[str] = []
    have = 0
    pos = start
    while pos < end and have < count:
        cut = min(end, pos + _WINDOW)
        if cut < end:
            while cut > pos and 0x80 <= raw[cut] < 0xC0:
                cut -= 1  # not inside a UTF-8 sequence
            back = raw.rfind(b"\\", max(pos, cut - 12), cut)
            if back != -1:  # not inside an escape: cut where the backslashes start
                while back > pos and raw[back - 1] == _BACKSLASH:
                    back -= 1
                cut = back
            if cut <= pos:
                return None
        text = json.loads(f'"{raw[pos:cut].decode("utf-8", "replace")}"')
        if cut < end and text and 0xD800 <= ord(text[-1]) < 0xDC00:
            return None  # a surrogate pair cut in two
        out.append(text)
        have += len(text)
        pos = cut
    return "".join(out)[:count]
