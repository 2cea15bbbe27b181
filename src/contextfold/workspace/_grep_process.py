"""A grep over one large item, matched in a worker process.

The screen of each 256 KB block and the split of the blocks that match are ``regex`` and
Python work: over a 100 MB item, about a second of it, a few milliseconds at a time. In a
matching thread of this process (set to nice 19 once past its grace, so a hostile pattern
burns only what the event loop leaves) that held the GIL, and the loop with it, for up to
2 s at a time on a loaded machine: the OS had stopped the thread while it held the GIL.
Here the matching thread only reads the item a megabyte at a time and writes it to a
worker process (``contextfold._process``) that runs the same
:class:`~contextfold.workspace._grep.Searcher`, under what is left of the deadline and the
result budget; both the reads and the writes release the GIL.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from typing import Any, BinaryIO

from .._process import WorkerFailed, run
from ._grep import Searcher, off_loop
from ._lines import iter_blocks
from ._types import GrepMatch, ItemInfo

__all__ = [
    "GREP_IN_PROCESS_BYTES",
    "grep_in_process",
    "search_bytes",
    "search_item",
    "search_stream",
]

GREP_IN_PROCESS_BYTES = 1 << 20
"""An item larger than this (its stored size) is matched in a worker process."""

_READ = 1 << 20


async def search_item(searcher: Searcher, info: ItemInfo, stream: BinaryIO, context: bool) -> None:
    """:func:`search_stream` off the event loop. A large item is matched in a worker
    process, and the thread that only moves its bytes there runs at normal priority (a
    nice-19 matching thread stopped while it held the GIL held the loop 270 to 370 ms
    under load); a small one in the matching threads, answered at the searcher's deadline."""
    if info.size > GREP_IN_PROCESS_BYTES:
        await asyncio.to_thread(search_stream, searcher, info, stream, context)
    else:
        await off_loop(search_stream, searcher, info, stream, context, deadline=searcher.deadline)


def search_stream(searcher: Searcher, info: ItemInfo, stream: BinaryIO, context: bool) -> None:
    """``searcher.search`` over one item's ``stream`` (closed after): in a worker process
    when the item is large, else here. Synchronous: call it in a matching thread."""
    with stream:
        if info.size > GREP_IN_PROCESS_BYTES:
            try:
                grep_in_process(searcher, info.ref, info.path, stream, complete_only=context)
                return
            except WorkerFailed:
                stream.seek(0)  # the worker took part of it and died: search it here
        searcher.search(info.ref, iter_blocks(stream, complete_only=context), info.path)


def grep_in_process(
    searcher: Searcher, ref: str, path: str | None, stream: BinaryIO, *, complete_only: bool
) -> None:
    """``searcher.search`` over ``stream``'s lines, matched in a worker process; the
    matches are added to ``searcher`` as if it had run here. ``TimeoutError`` past the
    deadline; ``WorkerFailed`` when the worker died having read part of ``stream``.
    Synchronous: call it in a matching thread."""
    if searcher.remaining <= 0:
        return
    answer: dict[str, Any] = run(
        search_bytes,
        _chunks(stream),
        searcher.pattern,
        searcher.deadline.left(),
        searcher.remaining,
        searcher.context,
        ref,
        path,
        complete_only,
    )
    for n, line, before, after in answer["matches"]:
        searcher.matches.append(GrepMatch(ref, n, line, tuple(before), tuple(after), path))
        searcher.remaining -= 1
    if answer["timeout"]:
        raise searcher.deadline.expired()


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(_READ):
        yield chunk


def search_bytes(
    data: bytes,
    pattern: str,
    left: float,
    remaining: int,
    context: int,
    ref: str,
    path: str | None,
    complete_only: bool,
) -> dict[str, Any]:
    """What runs in the worker: the matches of ``data``'s lines as JSON-able lists
    (line number, line, lines before, lines after) and whether the deadline passed."""
    searcher = Searcher(pattern, timeout=left, max_results=remaining, context=context)
    timeout = False
    try:
        searcher.search(ref, iter_blocks(io.BytesIO(data), complete_only=complete_only), path)
    except TimeoutError:
        timeout = True
    matches = [[m.line_number, m.line, list(m.before), list(m.after)] for m in searcher.matches]
    return {"matches": matches, "timeout": timeout}
