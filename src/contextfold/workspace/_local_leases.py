"""Session leases for ``LocalWorkspace``: an ``flock`` on ``{workdir}/leases/<session key>``.

The lock is taken on a descriptor of its own per grant and held until the lease is
released, so a second holder, in this process or another, is refused; the OS drops it
when the holder's process dies (even by SIGKILL), so the session is free again at once.
The file records the last grant (fencing token, owner, expiry as renewed), written by the
holder under the lock, so tokens grow with every grant and a refused worker learns who
holds the session. Lease files are never removed (purge keeps them): a token never repeats.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from ._lease import LeaseHolder, check_fence
from ._local_files import open_dir, open_file, same_file
from ._names import encode_key

__all__ = ["LocalLeases"]

_DIR = "leases"
_OPEN = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_SAVE_WAITS = 400
"""Tries (5 ms apart) to outwait state writes holding a lease file shared."""
_RECORD = 512
"""Bytes of a record, padded: each rewrite is one write of one length, inside one disk
sector, so a crash never leaves half of one record over the other."""


class LocalLeases:
    """The ``LeaseBackend`` of a ``LocalWorkspace`` and the fence on its state writes.

    ``root`` gives the held workspace directory's descriptor. Calls block (file I/O):
    the async primitives run them in a thread.
    """

    def __init__(self, root: Callable[[], int]) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, int]] = {}
        """By session key: the token and the locked descriptor of each lease held here."""
        self._lost: set[str] = set()

    # -- LeaseBackend ------------------------------------------------------------------------

    async def _lease_try(self, session_id: str, owner: str, ttl: float) -> int | LeaseHolder:
        skey = encode_key(session_id, what="session_id")
        return await asyncio.to_thread(self._try, skey, owner, ttl)

    async def _lease_renew(self, session_id: str, token: int, ttl: float) -> bool:
        skey = encode_key(session_id, what="session_id")
        return await asyncio.to_thread(self._renew, skey, token, ttl)

    async def _lease_release(self, session_id: str, token: int) -> None:
        skey = encode_key(session_id, what="session_id")
        await asyncio.to_thread(self._release, skey, token)

    # -- the file ----------------------------------------------------------------------------

    def _open(self, skey: str) -> int:
        dfd = open_dir(self._root(), _DIR, create=True)
        try:
            return open_file(dfd, skey, _OPEN, f"{_DIR}/{skey}")
        finally:
            os.close(dfd)

    def _current(self, skey: str, fd: int) -> bool:
        """Whether ``fd`` is still the session's lease file (not removed or replaced)."""
        try:
            dfd = open_dir(self._root(), _DIR)
        except OSError:
            return False
        try:
            return same_file(os.stat(skey, dir_fd=dfd, follow_symlinks=False), os.fstat(fd))
        except FileNotFoundError:
            return False
        finally:
            os.close(dfd)

    def _try(self, skey: str, owner: str, ttl: float) -> int | LeaseHolder:
        while True:
            fd = self._open(skey)
            if not _lock(fd):
                holder = _record(fd)[1]
                os.close(fd)
                return holder
            if self._current(skey, fd):
                break
            os.close(fd)  # removed behind our back after we opened it: lock the new one
        token = _record(fd)[0] + 1
        _write(fd, token, owner, ttl)
        with self._lock:
            self._held[skey] = (token, fd)
            self._lost.discard(skey)
        return token

    def _renew(self, skey: str, token: int, ttl: float) -> bool:
        with self._lock:
            held = self._held.get(skey)
        if held is None or held[0] != token:
            return False
        fd = held[1]
        if not self._current(skey, fd):  # the file was removed: another may lock a new one
            with self._lock:
                self._held.pop(skey, None)
                self._lost.add(skey)
            os.close(fd)
            return False
        owner = _record(fd)[1].owner
        _write(fd, token, owner, ttl)
        return True

    def _release(self, skey: str, token: int) -> None:
        with self._lock:
            held = self._held.get(skey)
            if held is None or held[0] != token:
                self._lost.discard(skey)
                return
            del self._held[skey]
            self._lost.discard(skey)
        fd = held[1]
        try:
            _write(fd, token, _record(fd)[1].owner, 0.0)
        finally:
            os.close(fd)  # drops the lock

    # -- fencing -----------------------------------------------------------------------------

    @contextmanager
    def fenced(self, skey: str, session_id: str) -> Iterator[None]:
        """Around a state write: refuse it unless no one else holds the session's lease.

        This instance's own lease is checked to still be the lease file; otherwise a
        shared lock is held during the write, so no lease is granted meanwhile (an
        ``acquire_lease`` at that moment waits for the write, up to 2 s).
        """
        with self._lock:
            held = self._held.get(skey)
            lost = skey in self._lost
        if held is not None and self._current(skey, held[1]):
            yield
            return
        fd = self._open(skey)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                row = None
            except BlockingIOError:
                token, holder = _record(fd)
                row = (token, holder, True)
            check_fence(session_id, row, held=None, was_lost=lost or held is not None)
            yield
        finally:
            os.close(fd)


def _lock(fd: int) -> bool:
    """Take the lease file's exclusive lock; False if a holder has it. A state write
    by a non-holder holds it shared for a moment (see ``fenced``): wait that out."""
    for _ in range(_SAVE_WAITS):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # exclusive: a lease holder
        fcntl.flock(fd, fcntl.LOCK_UN)
        time.sleep(0.005)
    return False


def _record(fd: int) -> tuple[int, LeaseHolder]:
    """The last grant recorded in a lease file (token 0 if none, or unreadable)."""
    try:
        data = json.loads(os.pread(fd, _RECORD, 0).strip() or b"{}")
        token = int(data.get("token", 0))
        holder = LeaseHolder(
            owner=str(data.get("owner", "another process")),
            expires_at=datetime.fromtimestamp(float(data.get("expires_at", 0)), UTC),
        )
    except (ValueError, TypeError, AttributeError, OverflowError, OSError):
        # A refused worker reading while the holder rewrites, or a file damaged from
        # outside (then tokens start again from 1).
        return 0, LeaseHolder("another process", datetime.fromtimestamp(0, UTC))
    return token, holder


def _write(fd: int, token: int, owner: str, ttl: float) -> None:
    """Record a grant (or its renewal) over the old record, in one write."""
    expires = time.time() + ttl if ttl > 0 else 0.0
    record = {"token": token, "owner": owner[:60], "expires_at": expires}
    body = json.dumps(record, ensure_ascii=True).encode()[: _RECORD - 1].ljust(_RECORD - 1)
    os.pwrite(fd, body + b"\n", 0)
    os.fsync(fd)  # a token must never be granted twice, even across a power loss
