"""A UTF-8 JSON object body decoded by msgspec, with where its members sit in its text.

The standard library's scanner took 0.5 ms of the 229 KB request that the gateway
emulates edits on (about 40% of what emulating adds); msgspec decodes it in 0.2 ms and
finds each member's bytes (``msgspec.Raw``) in 0.08 ms. msgspec is in the ``gateway``
extra; without it, or for any body it does not take (``NaN``, lone surrogates, numbers
out of a float's range, duplicate keys, not an object), :func:`locate` returns ``None``
and the standard library parses the body, as ``json.loads`` would. Every body msgspec
takes decodes to the values ``json.loads`` gives (``tests/gateway/test_gateway_wire_fast.py``).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

__all__ = ["Located", "decoded", "holds_block", "locate", "members"]

try:
    import msgspec
except ImportError:  # pragma: no cover - the gateway extra installs it
    msgspec = None  # type: ignore[assignment]

_WS = re.compile(rb"[ \t\n\r]*")
_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)

if msgspec is not None:
    _MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _VALUE = msgspec.json.Decoder()

    class _Block(msgspec.Struct):
        type: Any = None

    class _Message(msgspec.Struct):
        content: str | list[_Block] | None = None

    _BLOCK_TYPES = msgspec.json.Decoder(list[_Message])


class Located(NamedTuple):
    """What ``_wire.parse_body`` makes a ``ParsedBody`` of (offsets are in the text)."""

    data: dict[str, Any]
    members: dict[str, tuple[int, int]]
    sizes: dict[str, int]
    first: int | None
    last: tuple[int, int] | None
    byte_members: dict[str, tuple[int, int]]
    """The members' spans in the body's bytes."""


def _skip(raw: bytes, i: int) -> int:
    match = _WS.match(raw, i)
    return match.end() if match is not None else i


def members(raw: bytes) -> dict[str, tuple[int, int, int]] | None:
    """Each member of the object ``raw``, in order: where it starts, where its value
    starts and where it ends, in bytes; ``None`` if msgspec is not installed or does not
    take the body as a JSON object with distinct keys."""
    if msgspec is None:
        return None
    try:
        values = _MEMBERS.decode(raw)
    except ValueError:  # msgspec.DecodeError and UnicodeDecodeError among them
        return None
    out: dict[str, tuple[int, int, int]] = {}
    i = _skip(raw, 0) + 1  # msgspec checked the object's syntax: "{" here
    for _ in range(len(values)):
        i = _skip(raw, i)
        if raw[i : i + 1] == b",":
            i = _skip(raw, i + 1)
        key_match = _KEY.match(raw, i)
        if key_match is None:
            return None
        start, i = i, key_match.end()
        key = _VALUE.decode(key_match.group())
        i = _skip(raw, _skip(raw, i) + 1)  # past ":"
        value = values.get(key)
        if key in out or value is None or not raw.startswith(value, i):
            return None  # a repeated key: json.loads keeps the last value, in the first place
        out[key] = (start, i, i + len(value))
        i += len(value)
    i = _skip(raw, i)
    if raw[i : i + 1] != b"}":  # keys were repeated: more members than values
        return None
    return out


def holds_block(raw: bytes | memoryview, kind: str) -> bool | None:
    """Whether a message of ``raw`` (a JSON array of messages) has a content block of
    type ``kind``, read by msgspec without decoding the rest (0.1 ms on the 229 KB
    request); ``None`` if msgspec is not installed or a message, its content or a block
    is not of a shape that allows the answer (an object; a string, a list or null; an
    object)."""
    if msgspec is None:
        return None
    try:
        messages = _BLOCK_TYPES.decode(raw)
    except ValueError:
        return None
    found = [b for m in messages if type(m.content) is list for b in m.content if b.type == kind]
    return bool(found)


def decoded(raw: bytes | memoryview) -> Any:
    """One JSON value decoded by msgspec (``ValueError`` if it does not take it)."""
    return _VALUE.decode(raw)


def locate(raw: bytes, text: str) -> Located | None:
    """``raw`` (plain UTF-8, ``text`` its decoding) decoded with where its members are,
    or ``None`` when msgspec is not installed or does not take it."""
    if msgspec is None:
        return None
    found = members(raw)
    if found is None:
        return None
    ascii = len(text) == len(raw)
    at_byte, at_char = 0, 0

    def char(offset: int) -> int:
        """``offset`` in bytes as an offset in ``text`` (asked in increasing order)."""
        nonlocal at_byte, at_char
        if ascii:
            return offset
        at_char += len(raw[at_byte:offset].decode("utf-8", "surrogatepass"))
        at_byte = offset
        return at_char

    data: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    byte_spans: dict[str, tuple[int, int]] = {}
    sizes: dict[str, int] = {}
    first: int | None = None
    last: tuple[int, int] | None = None
    view = memoryview(raw)
    for key, (start, begin, end) in found.items():
        try:
            value = _VALUE.decode(view[begin:end])
        except ValueError:  # msgspec.DecodeError and UnicodeDecodeError among them
            return None
        data[key] = value
        opening = char(start)
        if key == "messages":  # where its first message starts and its last one ends
            first, last = None, None
            if isinstance(value, list) and value:
                first = char(_skip(raw, begin + 1))
                close = end - 1  # the closing bracket
                while raw[close - 1] in b" \t\n\r":
                    close -= 1
                last = (len(value) - 1, char(close))
        spans[key] = (opening, char(end))
        byte_spans[key] = (start, end)
        if isinstance(value, list | dict):
            sizes[key] = len(value)
    return Located(data, spans, sizes, first, last, byte_spans)
