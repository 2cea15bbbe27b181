"""Responses conversations chained by ``previous_response_id``: which conversation a
response id belongs to.

A client that lets the upstream keep the conversation (``store`` left on; Codex's
chained mode, the Agents SDK, most Responses clients) sends only its new items and the
id of the response it continues. Those items' hash, the conversation's key when nothing
else names it, differs turn by turn, so without help each turn would be a conversation
of its own: the results offloaded on earlier turns could not be read back. So every
response id the gateway gives back on ``/v1/responses`` in transparent mode is mapped to
the conversation that asked (:class:`ResponseChains`), and a chained request takes the
conversation of the response it continues (:func:`responses_key`).

The map is kept where the conversations' states are (the ``--state`` store, so a
restarted gateway or another replica knows the chain; else the most recent ids in
memory). An id is recorded as soon as the gateway sees it in the upstream's answer and
the write is awaited before the answer's last bytes go out, so a client that chains on
an answer it has whole finds the id recorded. A chain whose start the gateway never saw
(a response made before it ran) begins a conversation of its own at the first id it sees.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from .._logging import logger
from ..workspace import SessionStore
from ._openai_transparent import openai_key
from ._sessions import SESSION_HEADER
from ._sse import SSEEvents, event_name

__all__ = ["Record", "ResponseChains", "recorded", "responses_key"]

_PREFIX = "gateway-response/"
_MAX_ID = 256
"""Longer ids are not recorded (an id is an opaque string, but not a document)."""
_MAX_BODY = 16 * 1024 * 1024
"""A whole answer larger than this is relayed without looking for its id."""
_RESPONSE_EVENTS = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})

Record = Callable[[str], Awaitable[None]]
"""Maps one response id to the asking conversation (never raises)."""


class ResponseChains:
    """Response id to conversation key: in ``store`` when there is one (shared by
    restarts and replicas), else the most recent ``size`` in memory."""

    def __init__(self, store: SessionStore | None = None, *, size: int = 100_000) -> None:
        self.store = store
        self.size = size
        self._memory: OrderedDict[str, str] = OrderedDict()

    async def key_of(self, response_id: str) -> str | None:
        """The conversation that got ``response_id`` from this gateway, if known."""
        if not response_id or len(response_id) > _MAX_ID:
            return None
        if self.store is None:
            return self._memory.get(response_id)
        text = await self.store.load_state(_PREFIX + response_id)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        key = value.get("key") if isinstance(value, dict) else None
        return key if isinstance(key, str) else None

    async def record(self, response_id: str, key: str) -> None:
        """Map ``response_id`` to conversation ``key``."""
        if not response_id or len(response_id) > _MAX_ID:
            return
        if self.store is None:
            self._memory[response_id] = key
            self._memory.move_to_end(response_id)
            while len(self._memory) > self.size:
                self._memory.popitem(last=False)
            return
        await self.store.save_state(_PREFIX + response_id, json.dumps({"key": key}))

    def recorder(
        self, key: str, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> Record | None:
        """What records the ids of the answer to ``body`` under ``key``; ``None`` when
        nothing can chain on them (``store: false``: the upstream keeps no response) or
        the caller names the conversation itself (``x-contextfold-session``)."""
        if body.get("store") is False or headers.get(SESSION_HEADER):
            return None

        async def record(response_id: str) -> None:
            try:
                await self.record(response_id, key)
            except Exception as exc:  # the answer still goes out: only the chain is lost
                logger.warning("gateway: a response id was not recorded (%s)", type(exc).__name__)

        return record


async def responses_key(
    chains: ResponseChains, headers: Mapping[str, str], body: Mapping[str, Any]
) -> str:
    """The conversation of a Responses request: ``x-contextfold-session``; else, when it
    continues a response this gateway gave back, that response's conversation; else
    ``prompt_cache_key`` (with the opening's hash, see :func:`openai_key`); else, when it
    continues a response the gateway never saw, a conversation named by that id; else
    the hash of its opening."""
    previous = body.get("previous_response_id")
    if headers.get(SESSION_HEADER) or not isinstance(previous, str) or not previous:
        return openai_key(headers, body)
    found = await chains.key_of(previous)
    if found is not None:
        return found
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        return openai_key(headers, body)
    return f"c:{previous}"


def _id_of(data: bytes) -> str | None:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(value, dict) and isinstance(value.get("response"), dict):
        value = value["response"]
    found = value.get("id") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _event_data(event: bytes) -> bytes:
    lines = event.rstrip(b"\n").split(b"\n")
    return b"\n".join(line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:"))


async def recorded(
    chunks: AsyncIterator[bytes], *, streamed: bool, record: Record
) -> AsyncIterator[bytes]:
    """``chunks`` as they are (byte for byte), every response id in them recorded: in a
    stream, from each ``response.*`` lifecycle event, the write started at once and
    awaited before the chunk holding the final event is passed on; in a whole answer,
    from its ``id``, before its last chunk is passed on."""
    if not streamed:
        body = bytearray()
        held: bytes | None = None
        async for chunk in chunks:
            if held is not None:
                yield held
            held = chunk
            if len(body) <= _MAX_BODY:
                body += chunk
        found = _id_of(bytes(body)) if len(body) <= _MAX_BODY else None
        if found is not None:
            await record(found)
        if held is not None:
            yield held
        return
    events = SSEEvents()
    seen: set[str] = set()
    pending: list[asyncio.Task[None]] = []
    async for chunk in chunks:
        final = False
        for event in events.feed(chunk):
            name = event_name(event)
            if name and name not in _RESPONSE_EVENTS:
                continue  # deltas and items: only lifecycle events carry the response
            data = _event_data(event)
            if not name:  # a stream without event lines: the type is in the data
                name = next((n for n in _RESPONSE_EVENTS if n.encode() in data[:64]), "")
            if name not in _RESPONSE_EVENTS:
                continue
            final = final or name in _FINAL_EVENTS
            found = _id_of(data)
            if found is not None and found not in seen:
                seen.add(found)
                pending.append(asyncio.ensure_future(record(found)))
        if final and pending:
            await asyncio.gather(*pending)
            pending.clear()
        yield chunk
    if pending:
        await asyncio.gather(*pending)
