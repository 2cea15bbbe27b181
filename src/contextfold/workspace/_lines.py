"""The lines of one stored item, read from a stream in a worker thread.

A tool result can be 100 MB: decoding and splitting it whole to show one line held the
event loop for most of a second and took three times its size in memory. These helpers
read only the window asked for (skipping earlier lines in 64 KB chunks without decoding
them) or hand a grep one decoded line at a time. They are synchronous: call them through
``asyncio.to_thread`` or ``off_loop``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["OFF_LOOP_BYTES", "iter_blocks", "iter_lines", "read_window"]

OFF_LOOP_BYTES = 1 << 16
"""Payloads larger than this are encoded, serialized and indexed off the event loop."""

_CHUNK = 1 << 16
_BLOCK = 1 << 18


def iter_lines(stream: BinaryIO, *, complete_only: bool) -> Iterator[str]:
    """Each line of ``stream`` without its newline, decoded (invalid UTF-8 replaced).

    ``complete_only``: a last line without newline (a context log's write in flight or cut
    by a crash) is not a line yet and is left out.
    """
    for raw in stream:
        if raw.endswith(b"\n"):
            yield raw[:-1].decode("utf-8", "replace")
        elif not complete_only:
            yield raw.decode("utf-8", "replace")


def iter_blocks(stream: BinaryIO, *, complete_only: bool) -> Iterator[str]:
    """The lines of ``stream`` about 256 KB at a time: each block is whole lines joined by
    newlines (no newline at its end), decoded in one call; ``complete_only`` as in
    :func:`iter_lines`. Grep searches a block at once and splits only a block that matches,
    so a large item costs the loop's thread a few calls per block, not a few per line."""
    carry = b""
    while True:
        chunk = stream.read(_BLOCK)
        if not chunk:
            break
        chunk = carry + chunk if carry else chunk
        cut = chunk.rfind(b"\n")
        if cut == -1:
            carry = chunk  # one long line: read on until it ends
            continue
        carry = chunk[cut + 1 :]
        yield chunk[:cut].decode("utf-8", "replace")
    if carry and not complete_only:
        yield carry.decode("utf-8", "replace")


def read_window(
    stream: BinaryIO, offset: int, limit: int | None, *, complete_only: bool
) -> list[str]:
    """Lines ``offset`` to ``offset + limit`` (0-based) of ``stream``; closes it."""
    with stream:
        if offset > 0 and not _skip_lines(stream, offset):
            return []
        out: list[str] = []
        lines = iter_lines(stream, complete_only=complete_only)
        while limit is None or len(out) < limit:
            line = next(lines, None)
            if line is None:
                break
            out.append(line)
        return out


def _skip_lines(stream: BinaryIO, count: int) -> bool:
    """Move ``stream`` to the start of line ``count``; ``False`` if it has fewer lines."""
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return False
        found = chunk.count(b"\n")
        if found < count:
            count -= found
            continue
        pos = -1
        for _ in range(count):
            pos = chunk.index(b"\n", pos + 1)
        stream.seek(pos + 1 - len(chunk), io.SEEK_CUR)
        return True
