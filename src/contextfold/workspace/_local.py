"""LocalWorkspace: offloaded content as plain files under one directory."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._exceptions import UnsafePathError
from .._logging import logger
from ._grep import Deadline, off_loop
from ._names import CONTEXT_FILE, ItemPath, decode_key, is_capped, parse_ref, tool_file
from ._search import RawHit, SearchableWorkspace
from ._side_index import INDEX_FILE, SideIndex

__all__ = ["LocalWorkspace"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in the workspace must not block open(); it is rejected after.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REFS = "data.refs"
_STATE = "state.json"
_ID_FILE = ".session_id"
_FILE_MODE = 0o600  # tool output holds tokens and customer data: owner only
_DIR_MODE = 0o700


class LocalWorkspace(SearchableWorkspace):
    """Offloaded content under ``workdir``, in the layout of context-management.zh, section
    使用 LocalWorkspace::

        {workdir}/sessions/{session}/context.jsonl          offloaded messages, appended
        {workdir}/sessions/{session}/tool_result-{id}.txt   one whole tool result each
        {workdir}/data/{sha256}.{ext}                       images and audio, deduplicated
        {workdir}/skills/                                   the agent's skill directory
        {workdir}/search.sqlite3                            the search index (FTS5)

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
    holds tokens, keys and customer data. A ``workdir`` that already exists keeps its mode.
    """

    def __init__(self, workdir: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self._given = os.path.abspath(workdir)
        self._root = ""
        self._fsync = fsync
        self._index: SideIndex | None = None

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
        if not os.path.isdir(self._given):
            os.makedirs(self._given, _DIR_MODE, exist_ok=True)
            os.chmod(self._given, _DIR_MODE)  # makedirs' mode is filtered by the umask
        self._root = os.path.realpath(self._given)
        for sub in ("sessions", "data", "skills"):
            os.close(self._open_dir(sub, create=True))
        if self._index is None:
            self._index = SideIndex(os.path.join(self._root, INDEX_FILE))
            self._index.open()
        self._catch_up()

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

    def _open_dir(self, *parts: str, create: bool = False) -> int:
        """An fd of ``root/parts...``, each component opened without following symlinks."""
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                created = create and _mkdir(part, fd)
                try:
                    nfd = os.open(part, _DIR, dir_fd=fd)
                except OSError as exc:
                    _raise_unsafe(exc, "/".join(parts))
                    raise
                os.close(fd)
                fd = nfd
                if created:
                    _make_private(fd, _DIR_MODE)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _session_dir(self, skey: str, session_id: str, *, create: bool) -> int:
        sfd = self._open_dir("sessions")
        try:
            created = create and _mkdir(skey, sfd)
            try:
                dfd = os.open(skey, _DIR, dir_fd=sfd)
            except OSError as exc:
                _raise_unsafe(exc, f"sessions/{skey}")
                raise
        finally:
            os.close(sfd)
        if created:
            _make_private(dfd, _DIR_MODE)
        if created and is_capped(skey):  # the id cannot be decoded from a capped name
            _write_new(dfd, _ID_FILE, session_id.encode("utf-8", "surrogatepass"), fsync=False)
        return dfd

    def _open_file(self, dir_fd: int, name: str, flags: int, where: str) -> int:
        try:
            fd = os.open(name, flags, _FILE_MODE, dir_fd=dir_fd)
        except OSError as exc:
            _raise_unsafe(exc, where)
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePathError(f"{where} is not a regular file; refusing to use it")
        if flags & os.O_CREAT:
            _make_private(fd, _FILE_MODE)
        return fd

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        await asyncio.to_thread(self._append_sync, skey, session_id, CONTEXT_FILE, payload)

    def _append_sync(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        dfd = self._session_dir(skey, session_id, create=True)
        try:
            fd = self._open_file(dfd, name, _APPEND, f"sessions/{skey}/{name}")
        finally:
            os.close(dfd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _repair_tail(fd, f"sessions/{skey}/{name}")
            size = os.fstat(fd).st_size
            _write_all(fd, payload)
            if self._fsync:
                os.fsync(fd)
            if name == CONTEXT_FILE and self._index is not None:
                self._index.log_appended(skey, fd, size, payload)  # after the write
        finally:
            os.close(fd)  # releases the lock

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        return await asyncio.to_thread(self._put_tool_sync, skey, session_id, tkey, body)

    def _put_tool_sync(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        dfd = self._session_dir(skey, session_id, create=True)
        try:
            tmp = f".tmp-{uuid.uuid4().hex}"
            _write_new(dfd, tmp, body, fsync=self._fsync)
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
        await asyncio.to_thread(self._put_data_sync, skey, session_id, name, payload)

    def _put_data_sync(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        ddfd = self._open_dir("data")
        try:
            with _flocked(ddfd, fcntl.LOCK_SH):  # purge collects data under LOCK_EX
                self._append_sync(skey, session_id, _REFS, f"{name}\n".encode())
                try:
                    st = os.stat(name, dir_fd=ddfd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_size == len(payload):
                        return  # published by os.replace, so complete
                except FileNotFoundError:
                    pass
                tmp = f".tmp-{uuid.uuid4().hex}"
                _write_new(ddfd, tmp, payload, fsync=self._fsync)
                os.replace(tmp, name, src_dir_fd=ddfd, dst_dir_fd=ddfd)
                if self._fsync:
                    os.fsync(ddfd)
        finally:
            os.close(ddfd)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        await asyncio.to_thread(self._save_state_sync, skey, session_id, state)

    def _save_state_sync(self, skey: str, session_id: str, state: bytes) -> None:
        dfd = self._session_dir(skey, session_id, create=True)
        try:
            tmp = f".tmp-{uuid.uuid4().hex}"
            _write_new(dfd, tmp, state, fsync=self._fsync)
            os.replace(tmp, _STATE, src_dir_fd=dfd, dst_dir_fd=dfd)
            if self._fsync:
                os.fsync(dfd)
        finally:
            os.close(dfd)

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        return await asyncio.to_thread(self._get_sync, item)

    def _get_sync(self, item: ItemPath) -> bytes | None:
        parts = ("data",) if item.session_key is None else ("sessions", item.session_key)
        return self._read_in(parts, item.name)

    def _read_in(self, parts: tuple[str, ...], name: str) -> bytes | None:
        try:
            dfd = self._open_dir(*parts)
        except FileNotFoundError:
            return None
        try:
            fd = self._open_file(dfd, name, _READ, "/".join((*parts, name)))
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

    async def _load_state(self, skey: str) -> bytes | None:
        return await asyncio.to_thread(self._read_in, ("sessions", skey), _STATE)

    async def _sessions(self) -> list[str]:
        return await asyncio.to_thread(self._sessions_sync)

    def _sessions_sync(self) -> list[str]:
        sfd = self._open_dir("sessions")
        try:
            keys = [
                e.name
                for e in os.scandir(sfd)
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            ]
        finally:
            os.close(sfd)
        return [self._session_id(k) for k in keys]

    def _session_id(self, skey: str) -> str:
        if is_capped(skey):
            try:
                raw = self._read_in(("sessions", skey), _ID_FILE)
            except (UnsafePathError, OSError):
                raw = None
            if raw:
                return raw.decode("utf-8", "surrogatepass")
        return decode_key(skey)

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        return await asyncio.to_thread(self._items_sync, skey)

    def _items_sync(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        if skey is None:
            sfd = self._open_dir("sessions")
            try:
                keys = [e.name for e in os.scandir(sfd) if e.is_dir(follow_symlinks=False)]
            finally:
                os.close(sfd)
        else:
            keys = [skey]
        out: list[tuple[ItemPath, int, str | None]] = []
        data_names: set[str] = set()
        for key in keys:
            if key.startswith("."):
                continue
            try:
                dfd = self._open_dir("sessions", key)
            except FileNotFoundError:
                continue
            try:
                entries = _stat_entries(dfd)
                refs = self._read_in(("sessions", key), _REFS) if skey is not None else None
            finally:
                os.close(dfd)
            sid = self._session_id(key)
            for name, st in entries:
                if not stat.S_ISREG(st.st_mode):
                    continue
                try:
                    item = parse_ref(f"sessions/{key}/{name}")
                except UnsafePathError:
                    continue  # state, refs, temporaries
                out.append((item, st.st_size, sid))
            if refs:
                data_names.update(x for x in refs.decode("ascii", "replace").split("\n") if x)
        ddfd = self._open_dir("data")
        try:
            if skey is None:
                data_names = {e.name for e in os.scandir(ddfd)}
            for name in sorted(data_names):
                try:
                    item = parse_ref(f"data/{name}")
                    st = os.stat(name, dir_fd=ddfd, follow_symlinks=False)
                except (UnsafePathError, FileNotFoundError):
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((item, st.st_size, None if skey is None else self._session_id(skey)))
        finally:
            os.close(ddfd)
        return out

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        await asyncio.to_thread(self._purge_sync, skey)

    def _purge_sync(self, skey: str) -> None:
        sfd = self._open_dir("sessions")
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
            refs = self._read_in(("sessions", doomed), _REFS) or b""
            shutil.rmtree(doomed, dir_fd=sfd)
        finally:
            os.close(sfd)
        candidates = {x for x in refs.decode("ascii", "replace").split("\n") if x}
        if candidates:
            self._collect(candidates)

    def _collect(self, candidates: set[str]) -> None:
        """Delete the data files in ``candidates`` no remaining session references."""
        ddfd = self._open_dir("data")
        try:
            with _flocked(ddfd, fcntl.LOCK_EX):
                sfd = self._open_dir("sessions")
                try:
                    keys = [
                        e.name
                        for e in os.scandir(sfd)
                        if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                    ]
                finally:
                    os.close(sfd)
                for key in keys:
                    try:
                        raw = self._read_in(("sessions", key), _REFS)
                    except (UnsafePathError, FileNotFoundError):
                        continue
                    if raw:
                        candidates -= set(raw.decode("ascii", "replace").split("\n"))
                for name in candidates:
                    try:
                        parse_ref(f"data/{name}")
                        os.unlink(name, dir_fd=ddfd)
                    except (UnsafePathError, FileNotFoundError):
                        pass
        finally:
            os.close(ddfd)

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
                self._append_sync(skey, self._session_id(skey), CONTEXT_FILE, b"")
            else:
                body = self._read_in(("sessions", skey), name)
                if body is not None:
                    index.tool_stored(skey, name, body)
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
        return await off_loop(self._search_sync, terms, skey, limit, deadline)

    def _search_sync(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        assert self._index is not None
        try:
            hits = self._index.query(terms, skey, limit, time.monotonic() + deadline.left())
        except TimeoutError:
            raise deadline.expired() from None
        kept = []
        for hit in hits:  # never claim an item that is gone (removed behind our back)
            try:
                dfd = self._open_dir("sessions", hit.skey)
            except (FileNotFoundError, UnsafePathError):
                continue
            try:
                st = os.stat(hit.name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            finally:
                os.close(dfd)
            if stat.S_ISREG(st.st_mode):
                kept.append(dataclasses.replace(hit, session_id=self._session_id(hit.skey)))
        return kept


def _stat_entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """Names and stats in a directory; a temporary removed meanwhile is skipped."""
    out = []
    for entry in os.scandir(dir_fd):
        try:
            out.append((entry.name, entry.stat(follow_symlinks=False)))
        except FileNotFoundError:
            continue
    return out


def _mkdir(name: str, dir_fd: int) -> bool:
    """Create directory ``name``; whether this call created it."""
    try:
        os.mkdir(name, _DIR_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def _make_private(fd: int, mode: int) -> None:
    """Set ``mode`` exactly (the umask only ever removes bits from what ``open`` asked)."""
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) != mode and st.st_uid == os.geteuid():
        os.fchmod(fd, mode)


def _raise_unsafe(exc: OSError, where: str) -> None:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
        raise UnsafePathError(
            f"{where} is a symlink or special file inside the workspace; refusing to follow it"
        ) from exc


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]


def _write_new(dir_fd: int, name: str, payload: bytes, *, fsync: bool) -> None:
    fd = os.open(name, _NEW, _FILE_MODE, dir_fd=dir_fd)
    try:
        _make_private(fd, _FILE_MODE)
        _write_all(fd, payload)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _repair_tail(fd: int, where: str) -> None:
    """Cut a last line without newline (left by a crashed writer); caller holds the lock."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    keep = 0
    while end > 0:
        start = max(0, end - 65536)
        pos = os.pread(fd, end - start, start).rfind(b"\n")
        if pos != -1:
            keep = start + pos + 1
            break
        end = start
    os.ftruncate(fd, keep)
    logger.warning("cut a torn last line (%d bytes) from %s", size - keep, where)


@contextmanager
def _flocked(dir_fd: int, op: int) -> Iterator[None]:
    fd = os.open(
        ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE, dir_fd=dir_fd
    )
    try:
        _make_private(fd, _FILE_MODE)
        fcntl.flock(fd, op)
        yield
    finally:
        os.close(fd)
