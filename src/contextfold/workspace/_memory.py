"""MemoryWorkspace: the workspace protocol in process memory (tests, no disk)."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

from . import _fts
from ._glob import in_path_order
from ._grep import Deadline
from ._lines import OFF_LOOP_BYTES
from ._names import CONTEXT_FILE, ItemPath, tool_file
from ._pieces import Chunks, join_pieces, size_of
from ._search import Doc, RawHit, SearchableWorkspace, context_docs, rank_off_loop, tool_doc

__all__ = ["MemoryWorkspace"]

_OFF_LOOP_SESSIONS = 1_000
"""Listings of more sessions than this are made in a worker thread."""


class MemoryWorkspace(SearchableWorkspace):
    """Keeps everything in dictionaries; lost when the process exits.

    Same references and behaviour as the other backends (relative references such as
    ``sessions/s1/context.jsonl``); safe to share between tasks and threads. Ready when
    built (:meth:`initialize` is a no-op kept for the protocol). Search runs on an
    in-memory SQLite FTS5 index: each write queues its index change and applies the queue
    unless a search is running, which then applies it, so a long search never holds up a
    write.
    """

    def __init__(self) -> None:
        self._initialized = True
        self._lock = threading.Lock()
        self._ids: dict[str, str] = {}
        self._context: dict[str, list[bytes]] = {}
        """Each session's log as the payloads appended (joined when read, outside the lock:
        extending one buffer by 100 MB held the GIL, and the lock, for 0.2 s)."""
        self._sizes: dict[str, int] = {}
        self._tools: dict[str, dict[str, bytes]] = {}
        self._data: dict[str, bytes] = {}
        self._refs: dict[str, set[str]] = {}
        self._states: dict[str, bytes] = {}
        self._lines: dict[str, int] = {}
        self._pending: list[Callable[[sqlite3.Connection], None]] = []
        self._index_lock = threading.Lock()
        self._index: sqlite3.Connection | None = None

    async def initialize(self) -> None:
        """Nothing to create."""

    # Large writes, reads and listings run in a worker thread: a 100 MB tool result takes
    # a second to index, and 100,000 sessions half a second to list. Small ones stay on
    # the loop, where they cost less than the hop (and take the same loop turns each run).

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        await self._append_context_chunks(skey, session_id, [payload])

    async def _append_context_chunks(self, skey: str, session_id: str, chunks: Chunks) -> None:
        if size_of(chunks) > OFF_LOOP_BYTES:  # kept as pieces (see ``_pieces``)
            await asyncio.to_thread(self._append_sync, skey, session_id, chunks)
        else:
            self._append_sync(skey, session_id, chunks)

    def _append_sync(self, skey: str, session_id: str, chunks: Chunks) -> None:
        chunks = [bytes(c) for c in chunks]  # outside the lock, which readers on the loop take
        docs = context_docs(chunks, 0)
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._context.setdefault(skey, []).extend(chunks)
            self._sizes[skey] = self._sizes.get(skey, 0) + size_of(chunks)
            start = self._lines.get(skey, 0)
            docs = [dataclasses.replace(d, line=start + d.line) for d in docs]
            lines = self._lines[skey] = start + len(docs)
            self._pending.append(lambda c: _indexed(c, skey, CONTEXT_FILE, docs, lines))
        self._try_index()

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        return await self._put_tool_result_chunks(skey, session_id, tkey, [body])

    async def _put_tool_result_chunks(
        self, skey: str, session_id: str, tkey: str, chunks: Chunks
    ) -> str:
        if size_of(chunks) > OFF_LOOP_BYTES:
            return await asyncio.to_thread(self._put_tool_sync, skey, session_id, tkey, chunks)
        return self._put_tool_sync(skey, session_id, tkey, chunks)

    def _put_tool_sync(self, skey: str, session_id: str, tkey: str, chunks: Chunks) -> str:
        body, doc = bytes(join_pieces(chunks)), tool_doc(chunks)
        with self._lock:
            self._ids.setdefault(skey, session_id)
            tools = self._tools.setdefault(skey, {})
            name = tool_file(tkey)
            while name in tools:
                name = tool_file(tkey, unique=True)
            tools[name] = body
            self._pending.append(lambda c: _indexed(c, skey, name, [doc], 1))
        self._try_index()
        return name

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._refs.setdefault(skey, set()).add(name)
            self._data.setdefault(name, bytes(payload))

    async def _get(self, item: ItemPath) -> bytes | None:
        if item.kind == "context" and self._sizes.get(item.session_key or "", 0) > OFF_LOOP_BYTES:
            return await asyncio.to_thread(self._get_sync, item)
        return self._get_sync(item)

    def _get_sync(self, item: ItemPath) -> bytes | None:
        with self._lock:
            if item.kind == "data":
                return self._data.get(item.name)
            if item.kind != "context":
                return self._tools.get(item.session_key or "", {}).get(item.name)
            segments = self._context.get(item.session_key or "")
            if segments is None:
                return None
            segments = list(segments)
        return join_pieces(segments)  # outside the lock: a copy of up to the whole log

    async def _sessions(self) -> list[str]:
        with self._lock:
            return list(self._ids.values())

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        if skey is None and len(self._ids) > _OFF_LOOP_SESSIONS:
            return await asyncio.to_thread(self._items_sync, skey)
        return self._items_sync(skey)

    def _items_sync(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        with self._lock:
            keys = list(self._ids) if skey is None else [skey]
            out: list[tuple[ItemPath, int, str | None]] = []
            for key in keys:
                sid = self._ids.get(key)
                if key in self._context:
                    item = ItemPath("context", key, CONTEXT_FILE)
                    out.append((item, self._sizes[key], sid))
                for name, body in self._tools.get(key, {}).items():
                    out.append((ItemPath("tool_result", key, name), len(body), sid))
            names = set(self._data) if skey is None else self._refs.get(skey, set())
            owner = None if skey is None else self._ids.get(skey)
            for name in names:
                if name in self._data:
                    out.append((ItemPath("data", None, name), len(self._data[name]), owner))
            return out

    def _item_stream(self) -> Iterator[tuple[ItemPath, int, str | None]]:
        """Data files, then each session's items, a session at a time (``_glob``); the
        lock is taken per session, never for the whole listing."""
        with self._lock:
            data = [(ItemPath("data", None, n), len(b), None) for n, b in self._data.items()]
            keys = list(self._ids)
        data.sort(key=lambda listed: listed[0].name)

        def items_of(key: str) -> list[tuple[ItemPath, int, str | None]]:
            out: list[tuple[ItemPath, int, str | None]] = []
            with self._lock:
                sid = self._ids.get(key)
                if sid is None:
                    return out  # purged meanwhile
                if key in self._context:
                    out.append((ItemPath("context", key, CONTEXT_FILE), self._sizes[key], sid))
                for name, body in self._tools.get(key, {}).items():
                    out.append((ItemPath("tool_result", key, name), len(body), sid))
            return out

        yield from in_path_order(data, keys, items_of)

    async def _purge(self, skey: str) -> None:
        with self._lock:
            for table in (
                self._ids,
                self._context,
                self._sizes,
                self._tools,
                self._states,
                self._lines,
            ):
                table.pop(skey, None)
            self._pending.append(lambda c: _fts.drop_session(c, skey))
            for name in self._refs.pop(skey, set()):
                if not any(name in refs for refs in self._refs.values()):
                    self._data.pop(name, None)
        self._try_index()

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        with self._lock:
            self._ids.setdefault(skey, session_id)
            self._states[skey] = bytes(state)

    async def _load_state(self, skey: str) -> bytes | None:
        with self._lock:
            return self._states.get(skey)

    # -- search ----------------------------------------------------------------------------

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        return await rank_off_loop(self._search_sync, terms, skey, limit, deadline)

    def _search_sync(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        with self._index_lock:
            index = self._apply_pending()
            try:
                return _fts.fts_query(index, terms, skey, limit, time.monotonic() + deadline.left())
            except TimeoutError:
                raise deadline.expired() from None

    def _apply_pending(self) -> sqlite3.Connection:
        """Bring the index up to date; the caller holds ``_index_lock``."""
        if self._index is None:
            self._index = sqlite3.connect(":memory:", check_same_thread=False)
            with self._index:
                _fts.install(self._index)
        with self._lock:
            pending, self._pending = self._pending, []
        with self._index:
            for change in pending:
                change(self._index)
        return self._index

    def _try_index(self) -> None:
        """Apply the queued index changes (each write queues its own under ``_lock``, so
        they follow the content's order) unless a search is running: that search applies
        them, so a write never waits for a search."""
        if self._index_lock.acquire(blocking=False):
            try:
                self._apply_pending()
            finally:
                self._index_lock.release()

    def _session_of(self, skey: str) -> str | None:
        with self._lock:
            return self._ids.get(skey)


def _indexed(c: sqlite3.Connection, skey: str, name: str, docs: list[Doc], lines: int) -> None:
    _fts.add_docs(c, skey, name, docs)
    _fts.set_source(c, skey, name, 0, lines)
