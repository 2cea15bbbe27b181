"""A search index beside a store that cannot hold one: SQLite FTS5 in a file (WAL, 0600).

``LocalWorkspace`` keeps it in ``{workdir}/search.sqlite3``; ``S3Workspace`` in a
temporary file of its own, one per instance. The store and the index cannot share a
transaction, so the order is what keeps them true: a write reaches the store first and
the index after; a purge leaves the index first and the store after. The index may
therefore lag the store (a crash in between, another writer) but never claim what it
lacks, and it records how many bytes of each context log it holds, so the backend's
catch-up indexes the lines it missed. Searches read on a connection of their own, so a
long one never holds up an offload.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable

from .._exceptions import UnsafePathError
from .._logging import logger
from . import _fts
from ._names import CONTEXT_FILE
from ._pieces import Chunks, size_of
from ._search import RawHit, context_docs, tool_doc
from ._wal import enter_wal

__all__ = ["INDEX_FILE", "SideIndex"]

INDEX_FILE = "search.sqlite3"
_FILES = ("", "-wal", "-shm", "-journal")
"""The database file and SQLite's companions, by suffix."""
_BUSY_TIMEOUT = 60.0
"""How long a connection waits for another process's lock on the index."""


class SideIndex:
    """The index beside one workspace directory; the writer is shared by threads.

    Given ``dir_fd`` (the held workspace directory, which ``path`` names), the index and
    its ``-wal``, ``-shm`` and ``-journal`` files are checked, before and after SQLite
    opens them by path, to be regular files in that directory: a symlink planted there,
    or a workspace directory moved or replaced since it was opened, raises
    ``UnsafePathError`` instead of writing the index (which holds offloaded text)
    elsewhere. An index that is not a database, or whose image is malformed, is moved
    aside (``<name>.corrupt-<UTC time>``) and built again: it only holds what the store
    holds (:attr:`moved_aside` says where it went).
    """

    def __init__(self, path: str, *, dir_fd: int | None = None) -> None:
        self.path = path
        self._dir_fd = dir_fd
        self._name = os.path.basename(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.moved_aside: tuple[str, str] | None = None
        """``(new name, SQLite's error)`` when :meth:`open` found the index corrupt."""

    def open(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise  # locked, unable to open, full disk: not the file's content
            aside = self._move_aside()
            logger.warning(
                "search index %s is corrupt (%s): moved to %s, building it again",
                self.path,
                exc,
                aside,
            )
            self.moved_aside = (aside, str(exc))
            conn = self._connect()
        self._conn = conn

    def _connect(self) -> sqlite3.Connection:
        self._create()
        self._confined()
        conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
        try:
            enter_wal(conn, _BUSY_TIMEOUT)
            # NORMAL, even when the files are fsynced: a power loss may lose the last
            # index transactions, never half of one, and the catch-up indexes them again
            # from the files; no second fsync per offload.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                _fts.install(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._confined()  # the files SQLite opened are still the ones checked
        except BaseException:
            conn.close()
            raise
        return conn

    def _create(self) -> None:
        if self._dir_fd is None:
            _fts.create_private(self.path)
            return
        try:
            fd = os.open(
                self._name,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=self._dir_fd,
            )
        except FileExistsError:
            return
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)

    def _confined(self) -> None:
        """``UnsafePathError`` unless the index's files are regular files in the held
        directory, and the path SQLite opens names those same files."""
        if self._dir_fd is None:
            return
        for suffix in _FILES:
            name = self._name + suffix
            try:
                held = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(held.st_mode):
                raise UnsafePathError(
                    f"{name} in the workspace is a symlink or special file; refusing to "
                    "open the search index through it"
                )
            try:
                by_path = os.stat(self.path + suffix)
            except FileNotFoundError:
                by_path = None
            if by_path is None or (by_path.st_dev, by_path.st_ino) != (
                held.st_dev,
                held.st_ino,
            ):
                raise UnsafePathError(
                    f"{self.path + suffix} is not the {name} of the workspace directory "
                    "opened at start-up (moved or replaced since); refusing to use it"
                )

    def _move_aside(self) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = f"{self._name}.corrupt-{stamp}"
        folder = os.path.dirname(self.path)
        n = 1
        while os.path.lexists(os.path.join(folder, aside)):  # corrupt twice in a second
            n += 1
            aside = f"{self._name}.corrupt-{stamp}-{n}"
        for suffix in _FILES:
            try:
                if self._dir_fd is None:
                    os.rename(
                        os.path.join(folder, self._name + suffix),
                        os.path.join(folder, aside + suffix),
                    )
                else:
                    os.rename(
                        self._name + suffix,
                        aside + suffix,
                        src_dir_fd=self._dir_fd,
                        dst_dir_fd=self._dir_fd,
                    )
            except FileNotFoundError:
                continue
        return aside

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _write(self, what: str, change: Callable[[sqlite3.Connection], None]) -> bool:
        """Run ``change`` in one transaction; a failure only leaves the index behind (it
        catches up later), so it is logged, not raised: the content is stored. Whether
        the transaction committed."""
        with self._lock:
            conn = self._conn
            if conn is None:
                return False
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    change(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                logger.warning(
                    "search index %s: %s failed (%s); it catches up later", self.path, what, exc
                )
                return False
            return True

    def log_appended(self, skey: str, fd: int, size_before: int, payload: Chunks) -> None:
        """Index ``payload``, just appended at ``size_before`` to the log open as ``fd``
        (whose lock the caller holds), and first any lines the index missed."""

        def change(c: sqlite3.Connection) -> None:
            upto, lines = _fts.get_source(c, skey, CONTEXT_FILE) or (0, 0)
            if upto > size_before:  # the log was cut or replaced: index it afresh
                _fts.drop_item(c, skey, CONTEXT_FILE)
                upto = lines = 0
            if upto < size_before:
                missed = [os.pread(fd, size_before - upto, upto)]
                upto, lines = _extend(c, skey, upto, lines, missed)
            _extend(c, skey, upto, lines, payload)

        self._write(f"indexing sessions/{skey}/{CONTEXT_FILE}", change)

    def log_extended(self, skey: str, upto_before: int, payload: bytes) -> bool:
        """Index ``payload``, stored right after the first ``upto_before`` bytes of the
        session's log, if those are exactly what the index holds of it (a log stored in
        pieces, each indexed once, in order); whether it did."""
        extended = False

        def change(c: sqlite3.Connection) -> None:
            nonlocal extended
            upto, lines = _fts.get_source(c, skey, CONTEXT_FILE) or (0, 0)
            if upto == upto_before:
                _extend(c, skey, upto, lines, payload)
                extended = True

        return self._write(f"indexing sessions/{skey}/{CONTEXT_FILE}", change) and extended

    def tool_stored(self, skey: str, name: str, body: bytes | Chunks) -> None:
        def change(c: sqlite3.Connection) -> None:
            if _fts.get_source(c, skey, name) is None:
                _fts.add_docs(c, skey, name, [tool_doc(body)])
                size = len(body) if isinstance(body, bytes) else size_of(body)
                _fts.set_source(c, skey, name, size, 1)

        self._write(f"indexing sessions/{skey}/{name}", change)

    def drop_item(self, skey: str, name: str) -> None:
        self._write(f"dropping sessions/{skey}/{name}", lambda c: _fts.drop_item(c, skey, name))

    def drop_session(self, skey: str) -> None:
        self._write(f"dropping sessions/{skey}", lambda c: _fts.drop_session(c, skey))

    def indexed(self) -> dict[tuple[str, str], int]:
        """``(session key, item name) -> bytes indexed`` of everything indexed."""
        with self._lock:
            if self._conn is None:
                return {}
            rows = self._conn.execute("SELECT skey, name, upto FROM search_sources").fetchall()
        return {(str(k), str(n)): int(u) for k, n, u in rows}

    def query(
        self, terms: list[str], skey: str | None, limit: int, deadline: float
    ) -> list[RawHit]:
        self._confined()  # a reader opens the index by path, so check the path first
        conn = _fts.reader(self.path, busy=max(0.0, deadline - time.monotonic()))
        return _fts.fts_query(conn, terms, skey, limit, deadline)


def _extend(
    c: sqlite3.Connection, skey: str, upto: int, lines: int, payload: bytes | Chunks
) -> tuple[int, int]:
    """Index whole log lines ``payload`` stored at byte ``upto``, line ``lines``; the new
    ``(upto, lines)``."""
    docs = context_docs(payload, lines)
    _fts.add_docs(c, skey, CONTEXT_FILE, docs)
    size = len(payload) if isinstance(payload, bytes) else size_of(payload)
    upto, lines = upto + size, lines + len(docs)
    _fts.set_source(c, skey, CONTEXT_FILE, upto, lines)
    return upto, lines
