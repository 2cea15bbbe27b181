"""A request body parsed once, remembering where its members and messages sit in its text.

Re-serializing a 500 KB history to strip one field or mark one block costs more than
everything else the gateway does on a request, and it is not needed: every value the
gateway did not replace is forwarded as the client's own text. The gateway's transforms
never change a value in place (they build new dicts and lists), so a value that is still
the very object parsed here (``is``) still has the text it was parsed from.

Only the top-level members and the elements of ``messages`` are located; the values are
decoded by msgspec where it takes the body (``_wire_fast``), else by the standard
library's C scanner, to the values ``json.loads`` gives either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from json import decoder, scanner
from json.decoder import JSONDecodeError
from typing import Any, cast

from ._wire_fast import locate

__all__ = ["ParsedBody", "dumps", "parse_body"]

_SCAN = cast(Callable[[str, int], tuple[Any, int]], scanner.make_scanner(json.JSONDecoder()))  # type: ignore[arg-type]
"""The standard library's C scanner: decodes one JSON value at an offset."""
_STRING = cast(Callable[[str, int], tuple[str, int]], decoder.scanstring)  # type: ignore[attr-defined]
_WS = re.compile(r"[ \t\n\r]*")


def dumps(value: Any) -> str:
    """``value`` as compact JSON text, non-ASCII kept (the gateway's one format)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _value(text: str, i: int) -> tuple[Any, int]:
    try:
        found: tuple[Any, int] = _SCAN(text, i)
    except StopIteration as stop:
        raise JSONDecodeError("Expecting value", text, stop.value) from None
    return found


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match is not None else i


@dataclass
class ParsedBody:
    """A JSON object body: its bytes, its text, its decoded value, and where its parts are.

    ``members[key]`` is the span of ``"key": value`` in ``text``. Of the ``messages``
    array, decoded in one call, only where it starts and ends is known at first; where
    each message ends is learned on demand (:meth:`scan`) or from what the previous
    request of the conversation showed (:meth:`learn_end`).
    """

    raw: bytes
    text: str
    data: dict[str, Any]
    members: dict[str, tuple[int, int]]
    first: int | None
    """Where the first message starts (``None``: ``messages`` is not a non-empty array)."""
    utf8: bool = True
    """Whether ``raw`` is plain UTF-8 (no BOM): ``text`` is then ``raw`` decoded."""
    sizes: dict[str, int] = field(default_factory=dict)
    """Top-level member -> its size as parsed, for the lists and objects."""
    ends: dict[int, int] = field(default_factory=dict)
    """Message index -> where that message ends in ``text`` (known so far)."""
    byte_members: dict[str, tuple[int, int]] | None = None
    """``members`` in ``raw``'s bytes, when known (msgspec found them)."""
    _by_id: dict[int, int] | None = field(default=None, repr=False)

    @property
    def ascii(self) -> bool:
        """Whether character offsets in ``text`` are byte offsets in ``raw``."""
        return self.utf8 and len(self.text) == len(self.raw)

    @property
    def client_messages(self) -> list[Any] | None:
        messages = self.data.get("messages")
        return messages if isinstance(messages, list) and self.first is not None else None

    def encoded(self, start: int, end: int) -> bytes | memoryview:
        """The client's bytes of ``text[start:end]``."""
        if self.ascii:
            return memoryview(self.raw)[start:end]
        return self.text[start:end].encode("utf-8", "surrogatepass")

    def start(self, index: int) -> int | None:
        """Where message ``index`` starts, if known."""
        if index == 0:
            return self.first
        end = self.ends.get(index - 1)
        if end is None:
            return None
        i = _skip(self.text, end)
        return _skip(self.text, i + 1) if self.text[i : i + 1] == "," else None

    def end(self, index: int) -> int:
        """Where message ``index`` ends (scanned for if not yet known)."""
        found = self.ends.get(index)
        if found is None:
            self.scan(index, index)
            found = self.ends[index]
        return found

    def learn_end(self, index: int, end: int) -> None:
        """Message ``index`` ends at ``end`` (the caller verified it)."""
        self.ends[index] = end

    def scan(self, first: int, last: int) -> None:
        """Learn where message ``first`` starts and where every message from it to
        ``last`` ends, scanning from the nearest known boundary before it (those messages
        are decoded again, one by one)."""
        messages = self.client_messages
        if messages is None:
            return
        last = min(last, len(messages) - 1)
        if self.start(first) is not None and last in self.ends:
            return
        k = max((i + 1 for i in self.ends if i < first), default=0)
        at = self.start(k)
        if at is None:
            k, at = 0, self.first
        for index in range(k, last + 1):
            assert at is not None
            _, end = _value(self.text, at)
            self.ends[index] = end
            i = _skip(self.text, end)
            at = _skip(self.text, i + 1)

    def _client_index(self) -> dict[int, int]:
        if self._by_id is None:
            messages = self.client_messages or []
            self._by_id = {id(m): i for i, m in enumerate(messages)}
        return self._by_id

    def _run(self, first: int, last: int) -> str:
        """The client's text of its messages ``first`` to ``last``."""
        begin = self.start(first)
        if begin is None or last not in self.ends:
            self.scan(first, last)
            begin = self.start(first)
        assert begin is not None
        return self.text[begin : self.ends[last]]

    def _messages_text(self, messages: Sequence[Any]) -> str:
        """``messages`` as JSON text: runs of the client's own messages as it sent them."""
        client = self.client_messages
        index = self._client_index() if client is not None else {}
        parts: list[str] = []
        run: tuple[int, int] | None = None  # client indices [first, last] of the open run
        for message in messages:
            i = index.get(id(message))
            if i is not None and client is not None and client[i] is message:
                if run is not None and run[1] == i - 1:
                    run = (run[0], i)
                    continue
                if run is not None:
                    parts.append(self._run(*run))
                run = (i, i)
                continue
            if run is not None:
                parts.append(self._run(*run))
                run = None
            parts.append(dumps(message))
        if run is not None:
            parts.append(self._run(*run))
        return "[" + ",".join(parts) + "]"

    def _unchanged(self, key: str, value: Any) -> bool:
        """Whether ``value`` is member ``key`` as parsed: the same object, and for a list
        or an object the same size (a guard against an in-place append, which the
        gateway's code does not do)."""
        data = self.data
        if key not in data or data[key] is not value:
            return False
        size = self.sizes.get(key)
        return size is None or (isinstance(value, list | dict) and len(value) == size)

    def dumps(self, out: dict[str, Any]) -> bytes:
        """``out`` (built from ``data``) as the bytes to forward: every member and message
        that is still the object parsed here as the client's text, the rest as compact
        JSON. ``data`` itself, unchanged, is ``raw``."""
        if (
            self.utf8
            and out.keys() == self.members.keys()
            and all(self._unchanged(k, v) for k, v in out.items())
        ):
            return self.raw
        spliced = self._spliced(out)
        if spliced is not None:
            return spliced
        parts: list[str] = []
        for key, value in out.items():
            span = self.members.get(key)
            if span is not None and self._unchanged(key, value):
                parts.append(self.text[span[0] : span[1]])
            elif key == "messages" and isinstance(value, list):
                parts.append(dumps(key) + ":" + self._messages_text(value))
            else:
                parts.append(dumps(key) + ":" + dumps(value))
        return ("{" + ",".join(parts) + "}").encode("utf-8", "surrogatepass")

    def _spliced(self, out: dict[str, Any]) -> bytes | None:
        """``out`` as :meth:`dumps` gives it, when its messages are unchanged (or absent)
        and the members' places in the bytes are known: the client's bytes of every
        member kept joined in one copy (the text's slices, joined and encoded, were
        three copies of the 229 KB request: 0.07 ms)."""
        spans = self.members if self.ascii else self.byte_members
        if spans is None:
            return None
        parts: list[bytes | memoryview] = [b"{"]
        view = memoryview(self.raw)
        for key, value in out.items():
            if len(parts) > 1:
                parts.append(b",")
            span = spans.get(key)
            if span is not None and self._unchanged(key, value):
                parts.append(view[span[0] : span[1]])
            elif key == "messages" and isinstance(value, list):
                return None
            else:
                parts.append((dumps(key) + ":" + dumps(value)).encode("utf-8", "surrogatepass"))
        parts.append(b"}")
        return b"".join(parts)


def parse_body(raw: bytes) -> ParsedBody | Any:
    """``raw`` parsed as ``json.loads`` parses it (same values, same errors raised:
    ``JSONDecodeError``, ``UnicodeDecodeError``); a ``ParsedBody`` when it is an object,
    else the decoded value itself. msgspec decodes it where it can (``_wire_fast``)."""
    encoding = json.detect_encoding(raw)
    text = raw.decode(encoding, "surrogatepass")
    fast = locate(raw, text) if encoding == "utf-8" else None
    if fast is not None:
        parsed = ParsedBody(
            raw,
            text,
            fast.data,
            fast.members,
            fast.first,
            True,
            fast.sizes,
            byte_members=fast.byte_members,
        )
        if fast.last is not None:
            parsed.learn_end(*fast.last)
        return parsed
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        return json.loads(text)
    data: dict[str, Any] = {}
    members: dict[str, tuple[int, int]] = {}
    sizes: dict[str, int] = {}
    first: int | None = None
    last: tuple[int, int] | None = None  # the last message's index and end
    i = _skip(text, i + 1)
    if text[i : i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i : i + 1] != '"':
                raise JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            start = i
            key, i = _STRING(text, i + 1)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                raise JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _skip(text, i + 1)
            value: Any
            begin = i
            value, i = _value(text, i)
            if key == "messages":
                first, last = None, None
                if isinstance(value, list) and value:
                    first = _skip(text, begin + 1)
                    end = i - 1  # the closing bracket
                    while text[end - 1] in " \t\n\r":
                        end -= 1
                    last = (len(value) - 1, end)
            data[key] = value
            members[key] = (start, i)
            if isinstance(value, list | dict):
                sizes[key] = len(value)
            else:
                sizes.pop(key, None)
            i = _skip(text, i)
            char = text[i : i + 1]
            if char == ",":
                i = _skip(text, i + 1)
            elif char == "}":
                i += 1
                break
            else:
                raise JSONDecodeError("Expecting ',' delimiter", text, i)
    i = _skip(text, i)
    if i != len(text):
        raise JSONDecodeError("Extra data", text, i)
    parsed = ParsedBody(raw, text, data, members, first, encoding == "utf-8", sizes)
    if last is not None:
        parsed.learn_end(*last)
    return parsed
