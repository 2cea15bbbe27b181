"""Large bodies encoded and serialized in pieces, so no single call holds the GIL long.

A worker thread keeps the event loop free only between calls: a thread making one C call
holds the GIL, and the loop with it, until the call returns. ``str.encode`` of a 100 MB
tool result or ``model_dump_json`` of a 100 MB message is one such call (0.1 to 0.5 s).
These helpers do the same work 256K characters at a time and give the same bytes: UTF-8 and
JSON string escaping both map each character on its own, so the pieces of a string
encode to the pieces of its encoding. They are synchronous: call them in a worker thread.

The bytes stay in pieces (:data:`Chunks`, none over a megabyte) down to the backend that
stores them: freeing a 100 MB ``bytes`` object is one ``free`` (``munmap`` of its pages)
that holds the GIL, so the loop too, 12 ms here and 40 to 120 ms with three processes
spinning beside it, in whichever thread drops the last reference; that was most of what
held the loop during a Local offload of a 100 MB message. Pieces are freed one at a time
(:func:`release`), and the GIL changes hands between them.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from typing import Literal, get_origin

import pydantic_core
from pydantic import BaseModel

from .._process import run_pieces
from ..message import Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock

__all__ = [
    "PIECE_CHARS",
    "Chunks",
    "encode_pieces",
    "encoded",
    "head",
    "join_pieces",
    "message_lines",
    "release",
    "serialized",
    "size_of",
]

PIECE_CHARS = 1 << 18
"""Characters handled by one call: well under a millisecond of encoding or escaping."""
OFF_LOOP_CHARS = 1 << 16
"""Texts larger than this are encoded and serialized in a worker thread."""

Chunks = list[bytes]
"""A body as pieces of at most a megabyte each, in order (see the module)."""


def size_of(chunks: Chunks) -> int:
    return sum(len(c) for c in chunks)


def head(chunks: Chunks, size: int) -> bytes:
    """The first ``size`` bytes of ``chunks``, joined."""
    out: list[bytes] = []
    left = size
    for chunk in chunks:
        if left <= 0:
            break
        out.append(chunk[:left])
        left -= len(out[-1])
    return join_pieces(out) if out else b""


def release(chunks: Chunks) -> None:
    """Empty ``chunks``, freeing one piece per bytecode (see the module). Call it in the
    thread that wrote them, or a worker thread, once nothing else holds them."""
    while chunks:
        chunks.pop()


async def serialized(msgs: list[Msg]) -> Chunks:
    """The JSON lines of ``msgs`` as pieces; a large batch (a compaction can fold a 100 MB
    tool result) is serialized in a worker thread (see :func:`message_lines`), a small one
    on the loop, where it costs less than the hop and keeps the number of loop turns
    independent of thread timing."""
    if sum(_rough_size(m) for m in msgs) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(message_lines, msgs)
    return ["".join(f"{m.model_dump_json()}\n" for m in msgs).encode()]


async def encoded(text: str) -> Chunks:
    """``text.encode()`` as pieces, in a worker thread when it is large."""
    if len(text) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(encode_pieces, text)
    return [text.encode()]


def _rough_size(msg: Msg) -> int:
    """The characters of a message's texts (tool-call inputs counted by their raw form)."""
    if isinstance(msg.content, str):
        return len(msg.content)
    size = 0
    for block in msg.content:
        if isinstance(block, TextBlock):
            size += len(block.text)
        elif isinstance(block, ThinkingBlock):
            size += len(block.thinking)
        elif isinstance(block, ToolResultBlock):
            size += len(block.text())
        elif isinstance(block, ToolCallBlock):
            size += len(block.raw_input or "") + len(block.input)
    return size


def encode_pieces(text: str) -> list[bytes]:
    """``text.encode()``, as a list of pieces of at most ``PIECE_CHARS`` characters each."""
    return [text[i : i + PIECE_CHARS].encode() for i in range(0, len(text), PIECE_CHARS)] or [b""]


def join_pieces(pieces: list[bytes]) -> bytes:
    """One bytes object; CPython's ``bytes.join`` copies over 1 MB without the GIL."""
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def message_lines(msgs: list[Msg]) -> Chunks:
    """``"".join(f"{m.model_dump_json()}\\n" for m in msgs).encode()``, in pieces.

    A message holding a string over ``PIECE_CHARS`` is dumped with that string replaced
    by a placeholder, and the string's JSON form is put in its place a piece at a time.
    """
    out: list[bytes] = []
    for msg in msgs:
        out.extend(_message_pieces(msg))
        out.append(b"\n")
    return out


def _message_pieces(msg: Msg) -> list[bytes]:
    token = f"cfpiece{uuid.uuid4().hex}n"
    hidden: dict[str, str] = {}

    def hide(value: str) -> str:
        key = f"{token}{len(hidden)}"
        hidden[key] = value
        return key

    skeleton = _hide_strings(msg, hide)
    if not hidden:
        return [msg.model_dump_json().encode()]
    raw = skeleton.model_dump_json().encode()
    parts = re.split(rb'"(' + token.encode() + rb'\d+)"', raw)
    if len(parts) != 2 * len(hidden) + 1:  # a placeholder not written once each: no risk
        return [msg.model_dump_json().encode()]
    out: list[bytes] = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(part)
            continue
        out.append(b'"')
        out.extend(run_pieces(json_string_body, hidden[part.decode()]))
        out.append(b'"')
    return out


def json_string_body(value: str) -> bytes:
    """The JSON form of the string ``value`` without its quotes, escaped a piece at a time
    (escaping maps each character on its own). Run in a worker process
    (``contextfold._process``): escaping 100 MB is ~0.1 s of work that held this process's
    GIL."""
    return b"".join(
        pydantic_core.to_json(value[j : j + PIECE_CHARS])[1:-1]
        for j in range(0, len(value), PIECE_CHARS)
    )


def _hide_strings(model: BaseModel, hide: Callable[[str], str]) -> BaseModel:
    """A copy of ``model`` with each string field (in nested models and lists of them)
    over ``PIECE_CHARS`` replaced by ``hide(value)``; the model itself when none is."""
    update: dict[str, object] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, str):
            if len(value) > PIECE_CHARS and get_origin(field.annotation) is not Literal:
                update[name] = hide(value)
        elif isinstance(value, BaseModel):
            new = _hide_strings(value, hide)
            if new is not value:
                update[name] = new
        elif isinstance(value, list):
            items = [_hide_strings(v, hide) if isinstance(v, BaseModel) else v for v in value]
            if any(a is not b for a, b in zip(items, value, strict=True)):
                update[name] = items
    return model.model_copy(update=update) if update else model
