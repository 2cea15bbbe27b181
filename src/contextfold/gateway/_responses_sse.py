"""Responses streams with the gateway's compaction item in them.

Where OpenAI compacts during a response, its stream carries the compaction item's
``response.output_item.added`` and ``.done`` events before the model's output. The
gateway puts them right after the upstream's ``response.created``/``in_progress``
events, moves every later ``output_index`` and ``sequence_number`` up to make room, and
puts the item first in the final response's ``output``. Other events keep their bytes
until the item is placed; after it, each is re-encoded with the two numbers moved.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ._sse import SSEEvents, event_name

__all__ = ["compaction_stream", "item_events", "with_compaction_item"]

_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _encode(name: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


def _payload(event: bytes) -> dict[str, Any] | None:
    lines = event.rstrip(b"\n").split(b"\n")
    data = b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def item_events(item: dict[str, Any], *, output_index: int, first_sequence: int) -> list[bytes]:
    """The compaction item's ``output_item.added`` and ``.done`` events (both carry the
    whole item: clients act on ``.done``, and one reading ``.added`` gets no stub)."""
    return [
        _encode(
            name,
            {
                "type": name,
                "output_index": output_index,
                "item": item,
                "sequence_number": first_sequence + n,
            },
        )
        for n, name in enumerate(("response.output_item.added", "response.output_item.done"))
    ]


async def with_compaction_item(
    chunks: AsyncIterator[bytes], item: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The upstream's stream with ``item`` as its first output item."""
    events = SSEEvents()
    placed = False
    last_sequence = -1
    async for chunk in chunks:
        for event in events.feed(chunk):
            payload = _payload(event)
            if payload is None:
                yield event
                continue
            kind = payload.get("type")
            if not placed and kind not in _OPENING:
                for extra in item_events(item, output_index=0, first_sequence=last_sequence + 1):
                    yield extra
                placed = True
            sequence = payload.get("sequence_number")
            if isinstance(sequence, int) and not isinstance(sequence, bool):
                last_sequence = sequence
            if not placed:
                yield event
                continue
            yield _encode(event_name(event), _moved(payload, item))
    rest = events.rest()
    if rest:
        yield rest


def _moved(payload: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    for field, by in (("output_index", 1), ("sequence_number", 2)):
        value = out.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            out[field] = value + by
    response = out.get("response")
    if out.get("type") in _FINAL and isinstance(response, dict):
        output = response.get("output")
        if isinstance(output, list):
            out["response"] = {**response, "output": [item, *output]}
    return out


def compaction_stream(response: dict[str, Any]) -> Iterator[bytes]:
    """A whole response holding only its compaction item, as OpenAI streams one
    (``response.created``, ``in_progress``, the item's two events, ``completed``)."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    for n, name in enumerate(("response.created", "response.in_progress")):
        yield _encode(name, {"type": name, "response": opening, "sequence_number": n})
    (item,) = response["output"]
    yield from item_events(item, output_index=0, first_sequence=2)
    yield _encode(
        "response.completed",
        {"type": "response.completed", "response": response, "sequence_number": 4},
    )
