"""A ``/v1/messages`` request whose edits cannot change its messages, forwarded without
decoding them.

What Claude Code sends whenever thinking is on, ``clear_thinking_20251015`` with
``keep: "all"``, clears nothing; nor does a request without ``context_management``. If
no message can hold a compaction block either (which the gateway applies whatever the
request asks), the request goes upstream as the client's bytes without the field: the
same bytes the full path forwards (``_wire.ParsedBody.dumps``), found by two passes of
msgspec's over the body (its members' places, its blocks' types: 0.2 ms on the 229 KB
request) instead of decoding its messages into Python objects and scanning them (0.3
to 0.5 ms). Anything else, or without msgspec, takes the full path (``_messages``),
which also reports errors.
"""

from __future__ import annotations

from typing import NamedTuple

from ._edits import ClearThinking, EditError, parse_edits
from ._wire_fast import decoded, holds_block, members

__all__ = ["Kept", "kept_as_is"]

FIELD = "context_management"


class Kept(NamedTuple):
    """The bytes to forward, and whether the request carried ``context_management``
    (then its answer reports ``applied_edits: []``)."""

    body: bytes
    requested: bool


def kept_as_is(raw: bytes) -> Kept | None:
    """``raw`` as the gateway forwards it when its edits leave it as it is, or ``None``
    when they may not (or msgspec does not take the body)."""
    found = members(raw)
    if found is None or "messages" not in found:
        return None
    _, begin, end = found["messages"]
    if raw[begin : begin + 1] != b"[":
        return None
    view = memoryview(raw)
    if holds_block(view[begin:end], "compaction") is not False:
        return None
    field = found.get(FIELD)
    if field is None:
        return Kept(raw, False)
    try:
        edits = parse_edits(decoded(raw[field[1] : field[2]]))
    except (EditError, ValueError):
        return None  # the full path answers the error
    if not all(isinstance(e, ClearThinking) and e.keep is None for e in edits):
        return None
    parts = [view[start:stop] for key, (start, _, stop) in found.items() if key != FIELD]
    return Kept(b"".join((b"{", b",".join(parts), b"}")), True)
