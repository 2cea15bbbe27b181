"""A session's context log in S3, which has no append: one segment object per append.

Segments ``sessions/{session}/context/{n:012d}.jsonl`` are created with
``If-None-Match: *`` (a taken number moves the writer to the next one), then the index
``context/index.json`` (``{"segments": N, "log": id}``) is advanced with ``If-Match``.
Readers take the segments the index names and probe past it, so a writer that died
between the two steps loses nothing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .._exceptions import WorkspaceError
from .._logging import logger
from ._s3_client import S3Objects, gather
from ._s3_layout import index_key, segment_key

__all__ = ["ContextLog", "Head", "read_index"]

_ATTEMPTS = 8
"""Tries of one append when a purge of the same session races it."""


@dataclass(frozen=True)
class Head:
    """One version of a session's ``context/index.json``."""

    segments: int
    """Segments 0 to ``segments - 1`` exist."""
    etag: str | None
    """``None``: there is no index."""
    log: str | None
    """The log's id (see ``ContextLog._publish``); ``None`` in an older writer's index."""


async def read_index(objects: S3Objects, skey: str) -> Head:
    """The session's segment index as stored now (no index: no segments, no ETag)."""
    got = await objects.get(index_key(skey))
    if got is None:
        return Head(0, None, None)
    try:
        doc = json.loads(got[0])
        count, log = int(doc["segments"]), doc.get("log")
    except (ValueError, KeyError, TypeError):
        logger.warning("ignoring the unreadable segment index of session key %s", skey)
        count, log = 0, None
    return Head(count, got[1], log if isinstance(log, str) and log else None)


class ContextLog:
    """Appends to and reads the sessions' context logs; ``on_segment(skey, n, payload,
    head)`` runs after each segment this instance stores, before the next append of the
    session starts (the search index follows the log in order)."""

    def __init__(
        self, objects: S3Objects, on_segment: Callable[[str, int, bytes, Head], Awaitable[None]]
    ) -> None:
        self._objects = objects
        self._on_segment = on_segment
        self._append_locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[tuple[bytes, asyncio.Future[None]]]] = {}

    async def append(self, skey: str, payload: bytes) -> None:
        """Append whole lines to the session's log; returns once they are stored."""
        # Group commit: appends that wait while one is being written go out together, as
        # one segment (each call's lines stay together; calls were concurrent, so any
        # order between them is an order they could have had).
        entry = (payload, asyncio.get_running_loop().create_future())
        queue = self._queued.setdefault(skey, [])
        queue.append(entry)
        try:
            async with self._append_locks.setdefault(skey, asyncio.Lock()):
                if entry[1].done():
                    return  # written by the call before
                batch = [e for e in self._queued.pop(skey, []) if not e[1].done()]
                joined = b"".join(p for p, _ in batch)
                try:
                    n, head = await self._append_segment(skey, joined)
                except BaseException:
                    others = [e for e in batch if e is not entry]
                    self._queued[skey] = others + self._queued.get(skey, [])
                    raise
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
                await self._on_segment(skey, n, joined, head)
        except asyncio.CancelledError:
            if entry in self._queued.get(skey, []):
                self._queued[skey].remove(entry)
            raise

    async def _append_segment(self, skey: str, payload: bytes) -> tuple[int, Head]:
        """Store ``payload`` as the session's next segment; its number and the version of
        the index that names it."""
        for _ in range(_ATTEMPTS):
            head = await read_index(self._objects, skey)
            n = head.segments
            while await self._objects.put(segment_key(skey, n), payload, create=True) is None:
                n = await self._after(skey, n)  # taken: go past the last one stored
            if (published := await self._publish(skey, n, head)) is not None:
                return n, published
            # A purge removed the segments below ours: take ours back and start over.
            await self._objects.delete([segment_key(skey, n)])
        raise WorkspaceError(f"could not append to session key {skey}: purged while writing")

    async def _after(self, skey: str, n: int) -> int:
        """The number after the last segment stored beyond segment ``n``."""
        stored = await self._objects.list_range(
            f"sessions/{skey}/context/", after=segment_key(skey, n)
        )
        numbers = [
            int(name[: -len(".jsonl")])
            for name, _, _ in stored
            if name.endswith(".jsonl") and name[:-6].isdigit()
        ]
        return max([n, *numbers]) + 1

    async def _publish(self, skey: str, n: int, head: Head) -> Head | None:
        """Advance the index (read as ``head``) past segment ``n``; the version that names
        it, ``None`` if a purge raced the append.

        The index also names its log with a random id, kept by every update (``If-Match``)
        and new whenever the index is created: after a purge, so a reader that finds the
        id it indexed knows the segments it holds are still the log's beginning.
        """
        key = index_key(skey)
        while True:
            if head.segments >= n + 1:
                return head  # another writer indexed past us
            # Its id; a new one for a new index, or for an older writer's (without one).
            log = (head.etag and head.log) or uuid.uuid4().hex
            body = json.dumps({"segments": n + 1, "log": log}).encode()
            if head.etag is None:
                if n > 0 and await self._objects.exists(segment_key(skey, n - 1)) is None:
                    return None
                etag = await self._objects.put(key, body, create=True)
            else:
                etag = await self._objects.put(key, body, if_match=head.etag)
            if etag is not None:
                return Head(n + 1, etag, log)
            head = await read_index(self._objects, skey)

    async def read(self, skey: str) -> bytes | None:
        """The session's whole log, ``None`` if it has none."""
        objects = self._objects
        count = (await read_index(objects, skey)).segments
        parts = await gather(objects.get(segment_key(skey, i)) for i in range(count))
        bodies: list[bytes] = []
        for part in parts:
            if part is None:  # purged meanwhile
                return b"".join(bodies) if bodies else None
            bodies.append(part[0])
        n = count
        while (part := await objects.get(segment_key(skey, n))) is not None:
            bodies.append(part[0])  # stored by a writer that died before indexing it
            n += 1
        return b"".join(bodies) if bodies else None
