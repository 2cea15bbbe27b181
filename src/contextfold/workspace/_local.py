"""LocalWorkspace: offloaded content as plain files under one directory.

The item store and the catch-up of its search index; the confined, private file
primitives it writes and reads with are in ``_local_files``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import functools
import os
import shutil
import stat
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .._exceptions import UnsafePathError, WorkspaceError
from .._logging import logger
from ._glob import in_path_order
from ._grep import Deadline
from ._index_ro import query_read_only
from ._lease import Lease, acquire_lease
from ._local_files import (
    APPEND,
    DIR_MODE,
    DIRECTORY,
    collect_data,
    data_items,
    flocked,
    hold_root,
    make_dir,
    make_parents,
    make_private,
    open_dir,
    open_file,
    open_reader,
    raise_unsafe,
    read_file,
    repair_tail,
    stat_entries,
    write_all,
    write_new,
)
from ._local_leases import LocalLeases
from ._names import CONTEXT_FILE, ItemPath, decode_key, is_capped, parse_ref, tool_file
from ._pieces import Chunks
from ._search import RawHit, SearchableWorkspace, rank_off_loop
from ._side_index import INDEX_FILE, SideIndex
from ._types import SkippedEntry

__all__ = ["LocalWorkspace"]

_REFS = "data.refs"
_STATE = "state.json"
_ID_FILE = ".session_id"


class LocalWorkspace(SearchableWorkspace):
    """Offloaded content under ``workdir``, in the layout of context-management.zh, section
    使用 LocalWorkspace::

        {workdir}/sessions/{session}/context.jsonl          offloaded messages, appended
        {workdir}/sessions/{session}/tool_result-{id}.txt   one whole tool result each
        {workdir}/data/{sha256}.{ext}                       images and audio, deduplicated
        {workdir}/skills/                                   the agent's skill directory
        {workdir}/search.sqlite3                            the search index (FTS5)
        {workdir}/leases/{session}                          the session's lease (flock)

    ``{session}`` and ``{id}`` are encoded ids (see ``contextfold.workspace._names``), so no
    id can name a path outside ``workdir``; every path is opened component by component
    with ``O_NOFOLLOW``, so a symlink planted inside ``workdir`` raises ``UnsafePathError``.
    References handed out are absolute paths; the readers accept them and the relative
    form (``sessions/s1/context.jsonl``).

    Durability and concurrency:

    - ``context.jsonl``: each offload is one ``os.write`` of whole lines to an
      ``O_APPEND`` descriptor under an exclusive ``flock`` (threads, tasks and processes
      serialize; lines never interleave). A line cut by a crash has no newline: readers
      ignore it and the next writer truncates it before appending.
    - tool results and data files are written to a temporary name and published with
      ``os.link`` (tool results: never overwrites; a taken name gets a ``~<12 hex>`` suffix)
      or ``os.replace`` (data: a final name always holds complete content).
    - ``fsync=True`` (default) flushes each write to disk before the call returns, so an
      acknowledged offload survives power loss; ``fsync=False`` survives process crashes only.

    Search runs on a SQLite FTS5 index beside the files (see ``_side_index``): written
    after each file write, it may lag a crash but never claims a missing item, and the
    next append or ``initialize()`` indexes what it missed.

    Private by default: every file the workspace creates is ``0600`` and every directory
    ``0700`` (set with ``fchmod``, so the umask does not matter), since tool output often
    holds tokens, keys and customer data; so are the parents of ``workdir`` it creates. A
    directory that already exists keeps its mode.

    ``initialize()`` opens ``workdir`` once and every path is opened relative to that
    descriptor: a workdir swapped for a symlink later receives nothing; the index and its
    ``-wal``/``-shm`` must be regular files in it (else ``UnsafePathError``). Skipped,
    logged and listed in :attr:`skipped`: a session folder whose name or ``.session_id``
    does not decode, a corrupt index (moved to ``search.sqlite3.corrupt-<time>``, rebuilt).
    A ``SessionLease`` (:meth:`acquire_lease`); ``save_state`` is fenced like PostgreSQL's.

    ``read_only=True`` opens an existing workspace to look at it (``contextfold inspect``):
    nothing is created, repaired or indexed, every write raises ``WorkspaceError``, and
    search reads the index without writing (see ``_index_ro``; none if it is missing).
    """

    def __init__(
        self, workdir: str | os.PathLike[str], *, fsync: bool = True, read_only: bool = False
    ) -> None:
        self._given = os.path.abspath(workdir)
        self._root = ""
        self._root_fd: int | None = None
        """The workdir, opened once: every path is opened relative to it."""
        self._fsync = fsync
        self._read_only = read_only
        self._index: SideIndex | None = None
        self._skipped: dict[str, SkippedEntry] = {}
        self._leases = LocalLeases(lambda: self._dir)

    @property
    def workdir(self) -> Path:
        """The workspace directory (symlinks in the given path resolved)."""
        return Path(self._root or self._given)

    @property
    def skills_dir(self) -> Path:
        """The agent's skill directory, ``{workdir}/skills``."""
        return self.workdir / "skills"

    async def initialize(self) -> None:
        """Create ``workdir`` and its ``sessions``, ``data`` and ``skills`` directories."""
        await asyncio.to_thread(self._init_sync)
        self._initialized = True

    def _init_sync(self) -> None:
        if self._read_only:
            self._open_read_only()
            return
        if self._root_fd is None:
            make_parents(self._given)
            self._root_fd, self._root = hold_root(self._given)
            # Held for the object's life, not closed by close(): a call still in flight
            # must never open a path relative to a descriptor number reused meanwhile.
            weakref.finalize(self, os.close, self._root_fd)
        for sub in ("sessions", "data", "skills"):
            os.close(open_dir(self._dir, sub, create=True))
        if self._index is None:
            index = SideIndex(os.path.join(self._root, INDEX_FILE), dir_fd=self._dir)
            index.open()
            self._index = index
            if index.moved_aside is not None:
                aside, error = index.moved_aside
                reason = f"corrupt ({error}); moved to {aside} and rebuilt"
                self._skip(INDEX_FILE, reason, log=False)  # the index logged it
        self._catch_up()

    @property
    def _dir(self) -> int:
        if self._root_fd is None:
            raise WorkspaceError("LocalWorkspace is not initialized; call `await initialize()`")
        return self._root_fd

    def _open_read_only(self) -> None:
        if not os.path.isdir(self._given):
            raise WorkspaceError(f"{self._given}: no such workspace directory")
        if self._root_fd is None:
            self._root_fd, self._root = hold_root(self._given)
            weakref.finalize(self, os.close, self._root_fd)

    def _writable(self) -> None:
        if self._read_only:
            raise WorkspaceError(f"{self._given} was opened read-only; nothing is written")

    async def close(self) -> None:
        """Close the search index."""
        index, self._index = self._index, None
        self._initialized = False
        if index is not None:
            await asyncio.to_thread(index.close)

    # -- path handling ---------------------------------------------------------------------

    def _display(self, rel: str) -> str:
        return os.path.join(self._root, rel)

    def _resolve(self, ref: str) -> ItemPath:
        if isinstance(ref, str) and ref.startswith("/"):
            for base in (self._root, self._given):
                if ref.startswith(base + "/"):
                    return parse_ref(ref[len(base) + 1 :])
            raise UnsafePathError(f"{ref!r} is outside the workspace {self._root!r}")
        return parse_ref(ref)

    def _session_dir(self, skey: str, session_id: str, *, create: bool) -> int:
        sfd = open_dir(self._dir, "sessions")
        try:
            created = create and make_dir(skey, sfd)
            try:
                dfd = os.open(skey, DIRECTORY, dir_fd=sfd)
            except OSError as exc:
                raise_unsafe(exc, f"sessions/{skey}")
                raise
        finally:
            os.close(sfd)
        if created:
            make_private(dfd, DIR_MODE)
        if created and is_capped(skey):  # the id cannot be decoded from a capped name
            write_new(dfd, _ID_FILE, session_id.encode("utf-8", "surrogatepass"), fsync=False)
        return dfd

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        await self._append_context_chunks(skey, session_id, [payload])

    async def _append_context_chunks(self, skey: str, session_id: str, chunks: Chunks) -> None:
        self._writable()  # written as pieces, never joined (see ``_pieces``)
        await asyncio.to_thread(self._append_sync, skey, session_id, CONTEXT_FILE, chunks)

    def _append_sync(self, skey: str, session_id: str, name: str, payload: Chunks) -> None:
        dfd = self._session_dir(skey, session_id, create=True)
        try:
            fd = open_file(dfd, name, APPEND, f"sessions/{skey}/{name}")
        finally:
            os.close(dfd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            repair_tail(fd, f"sessions/{skey}/{name}")
            size = os.fstat(fd).st_size
            write_all(fd, payload)
            if self._fsync:
                os.fsync(fd)
            if name == CONTEXT_FILE and self._index is not None:
                self._index.log_appended(skey, fd, size, payload)  # after the write
        finally:
            os.close(fd)  # releases the lock

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        return await self._put_tool_result_chunks(skey, session_id, tkey, [body])

    async def _put_tool_result_chunks(
        self, skey: str, session_id: str, tkey: str, body: Chunks
    ) -> str:
        self._writable()
        return await asyncio.to_thread(self._put_tool_sync, skey, session_id, tkey, body)

    def _put_tool_sync(self, skey: str, session_id: str, tkey: str, body: Chunks) -> str:
        dfd = self._session_dir(skey, session_id, create=True)
        try:
            tmp = f".tmp-{uuid.uuid4().hex}"
            write_new(dfd, tmp, body, fsync=self._fsync)
            try:
                name = tool_file(tkey)
                while True:
                    try:
                        os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                        break
                    except FileExistsError:
                        name = tool_file(tkey, unique=True)
            finally:
                os.unlink(tmp, dir_fd=dfd)
            if self._fsync:
                os.fsync(dfd)
            if self._index is not None:
                self._index.tool_stored(skey, name, body)  # after the file is published
            return name
        finally:
            os.close(dfd)

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        self._writable()
        await asyncio.to_thread(self._put_data_sync, skey, session_id, name, payload)

    def _put_data_sync(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        ddfd = open_dir(self._dir, "data")
        try:
            with flocked(ddfd, fcntl.LOCK_SH):  # purge collects data under LOCK_EX
                self._append_sync(skey, session_id, _REFS, [f"{name}\n".encode()])
                try:
                    st = os.stat(name, dir_fd=ddfd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_size == len(payload):
                        return  # published by os.replace, so complete
                except FileNotFoundError:
                    pass
                tmp = f".tmp-{uuid.uuid4().hex}"
                write_new(ddfd, tmp, payload, fsync=self._fsync)
                os.replace(tmp, name, src_dir_fd=ddfd, dst_dir_fd=ddfd)
                if self._fsync:
                    os.fsync(ddfd)
        finally:
            os.close(ddfd)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        self._writable()
        await asyncio.to_thread(self._save_state_sync, skey, session_id, state)

    def _save_state_sync(self, skey: str, session_id: str, state: bytes) -> None:
        with self._leases.fenced(skey, session_id):
            dfd = self._session_dir(skey, session_id, create=True)
            try:
                tmp = f".tmp-{uuid.uuid4().hex}"
                write_new(dfd, tmp, state, fsync=self._fsync)
                os.replace(tmp, _STATE, src_dir_fd=dfd, dst_dir_fd=dfd)
                if self._fsync:
                    os.fsync(dfd)
            finally:
                os.close(dfd)

    async def acquire_lease(
        self, session_id: str, *, ttl: float = 30.0, wait: float = 0.0, owner: str | None = None
    ) -> Lease:
        """Take the session's lease (an ``flock`` on ``leases/<session>``; see
        ``_local_leases``), waiting up to ``wait`` seconds, then ``SessionLeasedError``
        naming the holder. Released when done, or by the OS when the holder dies."""
        self._require_init()
        return await acquire_lease(self._leases, session_id, ttl=ttl, wait=wait, owner=owner)

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        return await asyncio.to_thread(self._get_sync, item)

    def _get_sync(self, item: ItemPath) -> bytes | None:
        parts = ("data",) if item.session_key is None else ("sessions", item.session_key)
        return read_file(self._dir, parts, item.name)

    async def _open(self, item: ItemPath) -> BinaryIO | None:
        parts = ("data",) if item.session_key is None else ("sessions", item.session_key)
        return await asyncio.to_thread(open_reader, self._dir, parts, item.name)

    async def _load_state(self, skey: str) -> bytes | None:
        return await asyncio.to_thread(read_file, self._dir, ("sessions", skey), _STATE)

    async def _sessions(self) -> list[str]:
        return await asyncio.to_thread(self._sessions_sync)

    def _sessions_sync(self) -> list[str]:
        keys = [k for k in self._session_keys() if not k.startswith(".")]
        return [sid for sid in map(self._listed_id, keys) if sid is not None]

    def _session_keys(self) -> list[str]:
        """The directory names under ``sessions`` (none when a read-only workspace lacks it)."""
        try:
            sfd = open_dir(self._dir, "sessions")
        except FileNotFoundError:
            if not self._read_only:
                raise
            return []
        try:
            return [e.name for e in os.scandir(sfd) if e.is_dir(follow_symlinks=False)]
        finally:
            os.close(sfd)

    def _session_id(self, skey: str) -> str:
        if is_capped(skey):
            try:
                raw = read_file(self._dir, ("sessions", skey), _ID_FILE)
            except (UnsafePathError, OSError):
                raw = None
            if raw:
                return raw.decode("utf-8", "surrogatepass")
        return decode_key(skey)

    def _listed_id(self, skey: str) -> str | None:
        """The session id of folder ``skey``; ``None`` (the folder skipped, and reported
        in :attr:`skipped`) when its name or ``.session_id`` does not decode: no id
        encodes to it, so it was not written by a workspace."""
        try:
            return self._session_id(skey)
        except UnicodeDecodeError as exc:
            where = f"sessions/{skey}"
            what = f"its {_ID_FILE}" if is_capped(skey) else "its name"
            self._skip(where, f"{what} does not decode as UTF-8 ({exc.reason}); not a session")
            return None

    def _skip(self, path: str, reason: str, *, log: bool = True) -> None:
        if log and path not in self._skipped:
            logger.warning("workspace %s: skipping %s: %s", self._root, path, reason)
        self._skipped[path] = SkippedEntry(path, reason)

    @property
    def skipped(self) -> tuple[SkippedEntry, ...]:
        """What this workspace passed over rather than fail on, by path: session folders
        that do not decode, a corrupt search index moved aside and rebuilt."""
        return tuple(self._skipped[p] for p in sorted(self._skipped))

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        return await asyncio.to_thread(self._items_sync, skey)

    def _items_sync(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        keys = self._session_keys() if skey is None else [skey]
        out: list[tuple[ItemPath, int, str | None]] = []
        data_names: set[str] = set()
        for key in keys:
            refs = self._session_items(key, out, with_refs=skey is not None)
            if refs:
                data_names.update(x for x in refs.decode("ascii", "replace").split("\n") if x)
        try:
            ddfd = open_dir(self._dir, "data")
        except FileNotFoundError:
            if not self._read_only:
                raise
            return out
        try:
            if skey is None:
                data_names = {e.name for e in os.scandir(ddfd)}
            owner = None if skey is None else self._listed_id(skey)
            out.extend(data_items(ddfd, sorted(data_names), owner))
        finally:
            os.close(ddfd)
        return out

    def _session_items(
        self, key: str, out: list[tuple[ItemPath, int, str | None]], *, with_refs: bool
    ) -> bytes | None:
        """Add session folder ``key``'s items to ``out``; its ``data.refs`` if asked."""
        if key.startswith("."):
            return None
        sid = self._listed_id(key)
        if sid is None:
            return None
        try:
            dfd = open_dir(self._dir, "sessions", key)
        except FileNotFoundError:
            return None
        try:
            entries = stat_entries(dfd)
            refs = read_file(self._dir, ("sessions", key), _REFS) if with_refs else None
        finally:
            os.close(dfd)
        for name, st in entries:
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                item = parse_ref(f"sessions/{key}/{name}")
            except UnsafePathError:
                continue  # state, refs, temporaries
            out.append((item, st.st_size, sid))
        return refs

    def _item_stream(self) -> Iterator[tuple[ItemPath, int, str | None]]:
        """Data files, then each session's items, a session at a time (``_glob``); a
        generator, so nothing is listed until the thread iterating it starts."""
        try:
            ddfd = open_dir(self._dir, "data")
        except FileNotFoundError:
            if not self._read_only:
                raise
            data: list[tuple[ItemPath, int, str | None]] = []
        else:
            try:
                data = data_items(ddfd, sorted(e.name for e in os.scandir(ddfd)), None)
            finally:
                os.close(ddfd)

        def items_of(key: str) -> list[tuple[ItemPath, int, str | None]]:
            out: list[tuple[ItemPath, int, str | None]] = []
            self._session_items(key, out, with_refs=False)
            return out

        keys = (k for k in self._session_keys() if not k.startswith("."))
        yield from in_path_order(data, keys, items_of)

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        self._writable()
        await asyncio.to_thread(self._purge_sync, skey)

    def _purge_sync(self, skey: str) -> None:
        sfd = open_dir(self._dir, "sessions")
        try:
            try:
                st = os.stat(skey, dir_fd=sfd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafePathError(f"sessions/{skey} is not a directory; refusing to purge")
            if self._index is not None:
                self._index.drop_session(skey)  # before the files go
            doomed = f".purge-{uuid.uuid4().hex}"
            os.rename(skey, doomed, src_dir_fd=sfd, dst_dir_fd=sfd)
            refs = read_file(self._dir, ("sessions", doomed), _REFS) or b""
            shutil.rmtree(doomed, dir_fd=sfd)
        finally:
            os.close(sfd)
        candidates = {x for x in refs.decode("ascii", "replace").split("\n") if x}
        if candidates:
            collect_data(self._dir, candidates, _REFS)

    # -- search ----------------------------------------------------------------------------

    def _catch_up(self) -> None:
        """Index what the files hold and the index lacks (a crash between the two)."""
        index = self._index
        if index is None:
            return
        indexed = index.indexed()
        present = set()
        for skey, name, size in self._item_sizes():
            present.add((skey, name))
            if indexed.get((skey, name)) == size:
                continue
            if name == CONTEXT_FILE:
                self._append_sync(skey, self._session_id(skey), CONTEXT_FILE, [])
            else:
                body = read_file(self._dir, ("sessions", skey), name)
                if body is not None:
                    index.tool_stored(skey, name, [body])
        for skey in {k for k, n in indexed if (k, n) not in present}:
            if not any(k == skey for k, _ in present):
                index.drop_session(skey)  # removed behind the workspace's back

    def _item_sizes(self) -> list[tuple[str, str, int]]:
        return [
            (item.session_key, item.name, size)
            for item, size, _ in self._items_sync(None)
            if item.session_key is not None
        ]

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        self._require_init()
        return await rank_off_loop(self._search_sync, terms, skey, limit, deadline)

    def _search_sync(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        if self._index is not None:
            query = self._index.query
        else:  # read-only: the index as it is, if there is one
            path = os.path.join(self._root, INDEX_FILE)
            query = functools.partial(query_read_only, path)
        try:
            hits = query(terms, skey, limit, time.monotonic() + deadline.left())
        except TimeoutError:
            raise deadline.expired() from None
        kept = []
        for hit in hits:  # never claim an item that is gone (removed behind our back)
            try:
                dfd = open_dir(self._dir, "sessions", hit.skey)
            except (FileNotFoundError, UnsafePathError):
                continue
            try:
                st = os.stat(hit.name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            finally:
                os.close(dfd)
            sid = self._listed_id(hit.skey)
            if stat.S_ISREG(st.st_mode) and sid is not None:
                kept.append(dataclasses.replace(hit, session_id=sid))
        return kept
