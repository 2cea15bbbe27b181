"""The search index of an ``S3Workspace``, and its catch-up with what the bucket holds.

A SQLite FTS5 index of the instance's own (see ``_side_index``), in a private temporary
directory. An offload is indexed as it is stored; what other workers stored is indexed by
a catch-up before each search: a LIST of what the search covers, with a GET of each
segment or tool result the index lacks. The LIST resumes after the last segment the index
holds of a log while ``index.json`` still names the log by the id it had when those
segments were read, so a catch-up costs what is new, not the log's length.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable

from .._exceptions import WorkspaceError
from ._grep import Deadline, off_loop
from ._names import CONTEXT_FILE
from ._s3_client import S3Objects, gather
from ._s3_layout import Listed, Tip, by_session, layout, segment_key
from ._s3_log import Head, read_index
from ._search import RawHit
from ._side_index import INDEX_FILE, SideIndex

__all__ = ["S3SearchIndex"]

_INDEX_DIR = "contextfold-s3-"
"""The search indexes' directories in the temporary directory: ``{_INDEX_DIR}{pid}-...``."""
_SKIP_MIN = 64
"""The fewest indexed segments of a log a search across sessions skips. A skip costs one
request more (the range before the log is listed apart), which on the tests' server
takes as long as listing about 30 keys: from 64, a skip saves at least twice its cost."""


class S3SearchIndex:
    """The index (empty until :meth:`open`) and what it holds of each session's log."""

    def __init__(self, objects: S3Objects) -> None:
        self._objects = objects
        self.side: SideIndex | None = None
        """The SQLite FTS5 index itself; ``None`` until :meth:`open`, and after :meth:`close`."""
        self._tips: dict[str, Tip] = {}
        """Session key -> what the index holds of its log, where known."""
        self._log_locks: dict[str, asyncio.Lock] = {}
        self._gaps: dict[str, int] = {}
        """Session folder -> keys listed last time between it and the skipped log before
        it: how many the next listing of that range asks for first."""

    async def open(self) -> None:
        """Create the (empty) index, unless it is open."""
        if self.side is None:
            # Empty until a search: each search first catches up what it covers, so a
            # worker serving one session never lists or reads the rest of the fleet.
            self.side = await asyncio.to_thread(_open_index)

    async def close(self) -> None:
        """Remove the index."""
        index, self.side = self.side, None
        self._tips.clear()
        self._gaps.clear()
        if index is not None:
            await asyncio.to_thread(_remove_index, index)

    # -- indexing as this instance stores --------------------------------------------------

    async def tool_stored(self, skey: str, name: str, body: bytes) -> None:
        """Index a tool result, once stored."""
        if self.side is not None:
            await asyncio.to_thread(self.side.tool_stored, skey, name, body)

    async def session_purged(self, skey: str) -> None:
        """Drop the session, before its objects are deleted."""
        if self.side is not None:
            async with self._log_lock(skey):
                self._tips.pop(skey, None)
                await asyncio.to_thread(self.side.drop_session, skey)

    def _log_lock(self, skey: str) -> asyncio.Lock:
        """Held while a session's log entries in the index and its tip change together."""
        return self._log_locks.setdefault(skey, asyncio.Lock())

    async def segment_stored(self, skey: str, n: int, payload: bytes, head: Head) -> None:
        """Index segment ``n``, just stored and named by ``head``, if the index holds
        exactly the segments before it, of the log ``head`` names; else (another writer's
        segments between) the next catch-up indexes them all, in order, since a line's
        offset depends on every segment before it."""
        seen = self._tips.get(skey)
        keep = Tip(0, 0, head.log, None) if seen is None and n == 0 else seen
        if keep is None or keep.segments != n or keep.log != head.log:
            return
        await self._extend(skey, seen, keep, payload, 1, head.log, head.etag)

    async def _extend(
        self,
        skey: str,
        seen: Tip | None,
        keep: Tip | None,
        payload: bytes,
        segments: int,
        log: str | None,
        etag: str | None,
    ) -> None:
        """Index ``payload`` (``segments`` segments) after the part ``keep`` of the log
        the index holds (``None``: drop that part first), and move the tip past it;
        nothing if the tip moved since it was ``seen`` (an offload or another search
        indexed the log meanwhile: the next catch-up goes on from there)."""
        index = self.side
        async with self._log_lock(skey):
            if index is None or self._tips.get(skey) is not seen:
                return
            if keep is None:
                await asyncio.to_thread(index.drop_item, skey, CONTEXT_FILE)
                keep = Tip(0, 0, log, None)
            if payload and not await asyncio.to_thread(
                index.log_extended, skey, keep.size, payload
            ):
                self._tips.pop(skey, None)  # what the index holds is unknown: drop it later
                return
            tip = Tip(keep.segments + segments, keep.size + len(payload), log, etag)
            if tip != seen:
                self._tips[skey] = tip

    async def _forget(self, skey: str, name: str | None, seen: Tip | None) -> None:
        """Drop the session (``name`` None) or its log from the index, and its tip; nothing
        if the tip moved since it was ``seen``, before the listing that found it gone
        (an offload stored it again meanwhile)."""
        index = self.side
        async with self._log_lock(skey):
            if index is None or self._tips.get(skey) is not seen:
                return
            self._tips.pop(skey, None)
            if name is None:
                await asyncio.to_thread(index.drop_session, skey)
            else:
                await asyncio.to_thread(index.drop_item, skey, name)

    # -- search ----------------------------------------------------------------------------

    async def search(
        self,
        terms: list[str],
        skey: str | None,
        limit: int,
        deadline: Deadline,
        session_id: Callable[[str], Awaitable[str]],
    ) -> list[RawHit]:
        """Catch up with the bucket, then query; ``session_id`` names a hit's session."""
        index = self.side
        if index is None:
            raise WorkspaceError("S3Workspace is closed; call `await initialize()`")
        try:
            async with asyncio.timeout(deadline.left()):
                present = await self._catch_up(skey)
        except TimeoutError:
            raise deadline.expired() from None
        try:
            hits = await off_loop(
                index.query,
                terms,
                skey,
                limit,
                time.monotonic() + deadline.left(),
                deadline=deadline,
                lowest_priority=False,
            )
        except TimeoutError:
            raise deadline.expired() from None
        keys = {h.skey for h in hits}
        ids = dict(zip(keys, await gather(session_id(k) for k in keys), strict=True))
        return [
            dataclasses.replace(h, session_id=ids[h.skey])
            for h in hits
            if (h.skey, h.name) in present  # never an item the catch-up did not find
        ]

    # -- catch-up --------------------------------------------------------------------------

    async def _catch_up(self, skey: str | None) -> set[tuple[str, str]]:
        """Bring the index to what the bucket holds under ``sessions/`` (or the session
        ``skey``'s folder): index what it lacks, drop what the bucket lost. The
        ``(session key, name)`` of every item found there."""
        index = self.side
        if index is None:
            return set()
        found_layout, tips = await self._walk(skey)
        held: dict[str, dict[str, int]] = {}
        for (key, name), upto in (await asyncio.to_thread(index.indexed)).items():
            if skey is None or key == skey:
                held.setdefault(key, {})[name] = upto
        for key in held.keys() - found_layout.keys():  # purged by another worker
            await self._forget(key, None, tips.get(key))
        found = await gather(
            self._catch_up_session(index, key, listed, held.get(key, {}))
            for key, listed in found_layout.items()
        )
        return {
            (key, name) for key, names in zip(found_layout, found, strict=True) for name in names
        }

    async def _walk(self, skey: str | None) -> tuple[dict[str, Listed], dict[str, Tip]]:
        """What a listing of ``sessions/`` (or of the session ``skey``'s folder) shows,
        less the segments the index holds of each log it knows the id of (from 1 segment
        when searching a session, from ``_SKIP_MIN`` across sessions): the listing
        resumes after the last of them (``StartAfter``), so a search lists the tail of a
        log, not all of it. The ranges between skipped runs are listed concurrently.
        Also the tips as they were when it began."""
        prefix = "sessions/" if skey is None else f"sessions/{skey}/"
        tips = dict(self._tips)
        least = 1 if skey is not None else _SKIP_MIN
        skips = sorted(
            (f"sessions/{key}/", key, tip.segments)
            for key, tip in tips.items()
            if tip.log is not None and tip.segments >= least and (skey is None or key == skey)
        )
        ranges: list[tuple[str | None, str | None]] = []
        after: str | None = None
        for folder, key, n in skips:
            if folder > prefix:
                ranges.append((after, folder))
            after = segment_key(key, n - 1)
        ranges.append((after, None))
        parts = await gather(
            self._objects.list_range(
                prefix, after=a, before=b, first=1000 if b is None else self._gaps.get(b, 31) + 1
            )
            for a, b in ranges
        )
        for (_, before), part in zip(ranges, parts, strict=True):
            if before is not None:
                self._gaps[before] = len(part)
        found = by_session((entry for part in parts for entry in part), skey)
        for key, listed in found.items():
            listed.tip = tips.get(key)
        for _, key, n in skips:
            if key in found:
                found[key].start = n
        return found, tips

    async def _catch_up_session(
        self, index: SideIndex, skey: str, listed: Listed, held: dict[str, int]
    ) -> set[str]:
        """Bring one session's entries to ``listed``; the names of its items found."""
        log, etag = await self._head(skey, listed)
        if listed.start and (log is None or listed.tip is None or log != listed.tip.log):
            # Not the log whose beginning the index holds (purged): list all of it.
            tip = self._tips.get(skey)
            listed = (await layout(self._objects, skey)).get(skey) or Listed()
            listed.tip = tip
            log, etag = await self._head(skey, listed)
        present = set(listed.tools)
        for name in held.keys() - present - {CONTEXT_FILE}:  # gone from the bucket (purged)
            await asyncio.to_thread(index.drop_item, skey, name)
        tools = [
            self._catch_up_tool(index, skey, name, name in held)
            for name, size in listed.tools.items()
            if held.get(name) != size
        ]
        log_work = self._catch_up_log(skey, listed, log, etag, held.get(CONTEXT_FILE))
        if tools:
            logged, _ = await asyncio.gather(log_work, gather(tools))
        else:
            logged = await log_work  # most searches: no task to schedule
        return present | {CONTEXT_FILE} if logged else present

    async def _head(self, skey: str, listed: Listed) -> tuple[str | None, str | None]:
        """The id of the log the session's index names, and the index's ETag: from the
        tip when the listing shows the ETag the tip recorded, else read (one GET).
        Read before any segment it covers, so an id is never recorded for segments of
        an earlier log."""
        tip = listed.tip
        if listed.head is None:
            return None, None
        if tip is not None and tip.etag and tip.etag == listed.head:
            return tip.log, tip.etag
        head = await read_index(self._objects, skey)
        return head.log, head.etag

    async def _catch_up_log(
        self, skey: str, listed: Listed, log: str | None, etag: str | None, upto: int | None
    ) -> bool:
        """Index the segments past what the index holds of the log (all of them when
        that may not be the log's beginning any more), in order; whether there is a log."""
        tip = listed.tip
        sizes = listed.log()
        if not listed.start and not sizes:
            if upto is not None:
                await self._forget(skey, CONTEXT_FILE, tip)
            return False
        keep = tip if listed.start else _kept(tip, listed, log, upto)
        done = 0 if keep is None else keep.segments
        end = listed.start + len(sizes)
        if keep is tip and tip is not None and done == end and (tip.log, tip.etag) == (log, etag):
            return True  # nothing new
        parts = await gather(self._objects.get(segment_key(skey, n)) for n in range(done, end))
        bodies: list[bytes] = []
        for part in parts:
            if part is None:  # purged meanwhile
                break
            bodies.append(part[0])
        await self._extend(skey, tip, keep, b"".join(bodies), len(bodies), log, etag)
        return True

    async def _catch_up_tool(self, index: SideIndex, skey: str, name: str, stale: bool) -> None:
        got = await self._objects.get(f"sessions/{skey}/{name}")
        if stale:  # indexed at another size: stored again after a purge
            await asyncio.to_thread(index.drop_item, skey, name)
        if got is not None:
            await asyncio.to_thread(index.tool_stored, skey, name, got[0])


def _kept(tip: Tip | None, listed: Listed, log: str | None, upto: int | None) -> Tip | None:
    """What the index may keep of a session's log (``upto`` bytes held, ``tip``), now that
    the log is named ``log`` and ``listed`` shows its segments; ``None``: drop it all, it
    may not be the log's beginning any more (purged and written again)."""
    sizes = listed.log()
    if tip is not None and tip.log is not None:  # the id proves it, or disproves it
        whole = tip.log == log and tip.segments <= listed.start + len(sizes)
        return tip if whole else None
    if upto is None:
        return Tip(0, 0, log, None)
    if log is not None:
        return None  # held while the log had no id: not provably this log's
    # Neither names a log (an older writer's): the sizes must line up, as before ids.
    done = total = 0
    while done < len(sizes) and total < upto:
        total += sizes[done]
        done += 1
    return Tip(done, total, None, None) if total == upto else None


def _open_index() -> SideIndex:
    """A search index in a new private (0700) temporary directory named after this
    process; first the directories of processes that are gone (killed before
    :meth:`S3SearchIndex.close`) are removed, since they hold offloaded text."""
    for path in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), f"{_INDEX_DIR}*")):
        pid = os.path.basename(path)[len(_INDEX_DIR) :].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
    root = tempfile.mkdtemp(prefix=f"{_INDEX_DIR}{os.getpid()}-")
    index = SideIndex(os.path.join(root, INDEX_FILE))
    index.open()
    return index


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive, and not ours to remove
        return True
    return True


def _remove_index(index: SideIndex) -> None:
    index.close()
    shutil.rmtree(os.path.dirname(index.path), ignore_errors=True)
