"""What leaves the context goes to the offloader, through the redaction hook, once.

compress-context.zh, section 卸载 (Offload): compressed messages and the whole text of a
truncated tool result are saved where the agent can read them back. Read-back results are
never saved again (their content is in the workspace already), everything saved goes
through ``ContextConfig.redact`` first, and the same content is saved once: a resumed
conversation that meets it again gets the reference it had. A tool result is known by its
content (two calls that returned the same text share one file); compressed messages by
their ids and content (two spans of distinct messages are two offloads, so every message
id stays findable).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from typing import Protocol, cast

from .._process import run_pieces
from .._structural import implements
from ..message import DataBlock, Msg, ToolResultBlock, is_readback
from ..workspace import DataOffloader, Offloader
from ._config import ContextConfig
from ._redact_pieces import redact_messages_off_loop, redact_tool_result_off_loop
from ._trim import TRUNCATION_MARKER, truncation_marker

__all__ = ["SessionOffload"]


class _Owner(Protocol):
    """What the offloads read of their engine, at each offload (it may change)."""

    offloader: Offloader | None
    session_id: str
    config: ContextConfig


class SessionOffload:
    """One engine's offloads (nothing is saved without an offloader); ``known`` maps the
    digest of everything saved to its reference."""

    def __init__(self, engine: _Owner) -> None:
        self._engine = engine
        self.known: dict[str, str] = {}

    async def context(self, msgs: list[Msg]) -> str | None:
        """Save compressed messages; their reference."""
        engine = self._engine
        if engine.offloader is None or not msgs:
            return None
        redact = engine.config.redact
        if redact is not None:
            msgs = await redact_messages_off_loop(msgs, redact)
        key = await _key(
            "context",
            [[m.id, m.role, m.name, m.model_dump(mode="json")["content"]] for m in msgs],
        )
        if key not in self.known:
            self.known[key] = await engine.offloader.offload_context(engine.session_id, msgs)
        return self.known[key]

    async def result(self, block: ToolResultBlock) -> str | None:
        """Save the whole of a tool result; its reference (none for a read-back result:
        offloading it would copy workspace content again, and each later Read of the copy
        could be copied once more)."""
        return await self._result(block, redacted=False)

    async def redacted_result(self, block: ToolResultBlock) -> str | None:
        """:meth:`result` of a block already through ``ContextConfig.redact`` (the
        truncation redacts a result once, for both its offload and its cut)."""
        return await self._result(block, redacted=True)

    async def _result(self, block: ToolResultBlock, *, redacted: bool) -> str | None:
        engine = self._engine
        if engine.offloader is None or is_readback(block):
            return None
        redact = engine.config.redact
        if redact is not None and not redacted:
            block = await redact_tool_result_off_loop(block, redact)
        key = await _key("result", [block.name, block.model_dump(mode="json")["output"]])
        if key not in self.known:
            ref = await self._saved_as(block)
            if ref is not None:  # already cut once: the whole of it is saved there
                return ref
            ref = await engine.offloader.offload_tool_result(engine.session_id, block)
            self.known[key] = ref
        return self.known[key]

    async def _saved_as(self, block: ToolResultBlock) -> str | None:
        """The reference a result's truncation marker names, when that result was saved
        here whole: a result cut again (at a compaction) is not saved over its original.
        A long text is looked through in a worker thread, a piece at a time (one ``in``
        per saved reference over 100 MB held the loop ~10 ms each)."""
        text = block.text()
        refs = sorted({r for r in self.known.values() if r is not None})
        if not refs:
            return None
        if len(text) <= _PIECE:
            return next((ref for ref in refs if truncation_marker(ref) in text), None)
        return await asyncio.to_thread(_marker_in_pieces, text, refs)

    async def image(self, block: DataBlock) -> str | None:
        """Save an image leaving the context, when the offloader keeps data."""
        engine = self._engine
        if implements(engine.offloader, DataOffloader):
            return await cast(DataOffloader, engine.offloader).offload_data(
                engine.session_id, block
            )
        return None


def _marker_in_pieces(text: str, refs: list[str]) -> str | None:
    """The first of ``refs`` whose truncation marker is in ``text`` (as ``in`` would
    tell): every marker starts with the same head, looked for ``_PIECE`` characters at a
    time, and each place it is found is compared with each marker."""
    head = TRUNCATION_MARKER[: TRUNCATION_MARKER.index("\n") + 1]
    markers = [truncation_marker(ref) for ref in refs]
    found: set[int] = set()
    start = 0
    while start < len(text):
        end = min(len(text), start + _PIECE + len(head))
        at = text.find(head, start, end)
        if at == -1:
            if end == len(text):
                break
            start = end - len(head) + 1
            continue
        found |= {i for i, marker in enumerate(markers) if text.startswith(marker, at)}
        start = at + 1
    return refs[min(found)] if found else None


def _digest(kind: str, value: object) -> str:
    data = json.dumps([kind, value], ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()


_PIECE = 1 << 18
"""Characters of a long string escaped and hashed by one call."""


async def _key(kind: str, value: object) -> str:
    """``_digest(kind, value)``; when ``value`` holds a string over ``_PIECE`` characters,
    computed in a worker thread a piece at a time: one ``json.dumps`` and ``sha256`` of a
    100 MB tool result held the event loop for 1.6 to 2.5 s."""
    if not _has_long(value):
        return _digest(kind, value)
    return await asyncio.to_thread(_digest_in_pieces, kind, value)


def _has_long(value: object) -> bool:
    if isinstance(value, str):
        return len(value) > _PIECE
    if isinstance(value, list):
        return any(_has_long(v) for v in value)
    if isinstance(value, dict):
        return any(_has_long(v) for v in value.values())
    return False


def _digest_in_pieces(kind: str, value: object) -> str:
    """The same digest: the long strings are dumped with placeholders, and each one's JSON
    form (escaping maps each character on its own) is hashed in its place, piece by piece."""
    token = f"cfdigest{uuid.uuid4().hex}n"
    hidden: dict[str, str] = {}

    def hide(v: object) -> object:
        if isinstance(v, str) and len(v) > _PIECE:
            hidden[f"{token}{len(hidden)}"] = v
            return f"{token}{len(hidden) - 1}"
        if isinstance(v, list):
            return [hide(x) for x in v]
        if isinstance(v, dict):
            return {k: hide(x) for k, x in v.items()}
        return v

    skeleton = json.dumps([kind, hide(value)], ensure_ascii=False, sort_keys=True, default=str)
    parts = re.split(f'"({token}\\d+)"', skeleton)
    if len(parts) != 2 * len(hidden) + 1:  # a placeholder not written once each: no risk
        return _digest(kind, value)
    digest = hashlib.sha256()
    for i, part in enumerate(parts):
        if i % 2 == 0:
            digest.update(part.encode())
            continue
        digest.update(b'"')
        # Hashing releases the GIL; the escaped text comes back in pieces, each freed
        # after it is hashed: one 100 MB bytes object's free holds the GIL (``_pieces``
        # of the workspace) for 12 to 120 ms.
        pieces = run_pieces(escaped_json, hidden[part])
        pieces.reverse()
        while pieces:
            digest.update(pieces.pop())
        digest.update(b'"')
    return digest.hexdigest()


def escaped_json(text: str) -> bytes:
    """``json.dumps(text, ensure_ascii=False)`` without its quotes, encoded: run in a
    worker process (``contextfold._process``) for a long string, where escaping 100 MB a
    piece at a time does not hold this process's GIL."""
    return b"".join(
        json.dumps(text[start : start + _PIECE], ensure_ascii=False)[1:-1].encode()
        for start in range(0, len(text), _PIECE)
    )
