"""Files under one root directory, confined and private.

Every path is opened component by component with ``O_NOFOLLOW``, so a symlink or special
file planted under the root raises ``UnsafePathError``; every file created is ``0600`` and
every directory ``0700`` (set with ``fchmod``, so the umask does not matter). Also the
writing primitives of ``LocalWorkspace``: whole writes, new files, a torn last line cut,
``flock`` on a lock file, the collection of unreferenced data files.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from .._exceptions import UnsafePathError
from .._logging import logger
from ._names import ItemPath, parse_ref

__all__ = [
    "APPEND",
    "DIRECTORY",
    "DIR_MODE",
    "FILE_MODE",
    "READ",
    "collect_data",
    "data_items",
    "flocked",
    "hold_root",
    "make_dir",
    "make_parents",
    "make_private",
    "open_dir",
    "open_file",
    "open_reader",
    "raise_unsafe",
    "read_file",
    "repair_tail",
    "same_file",
    "stat_entries",
    "write_all",
    "write_new",
]

# The flags of each open: a directory component, reading, appending, a new file.
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in the workspace must not block open(); it is rejected after.
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o600  # tool output holds tokens and customer data: owner only
DIR_MODE = 0o700


def make_parents(path: str) -> None:
    """Create ``path`` and its missing parents, each ``0700`` whatever the umask (those
    that exist keep their mode); ``os.makedirs`` gives new parents ``0777 & ~umask``."""
    missing = []
    head = os.path.abspath(path)
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for new in reversed(missing):
        try:
            os.mkdir(new, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, keeps its mode
        fd = os.open(new, DIRECTORY)
        try:
            make_private(fd, DIR_MODE)
        finally:
            os.close(fd)


def hold_root(path: str) -> tuple[int, str]:
    """An fd of the directory ``path`` and its resolved path, checked to be one directory.

    The workspace opens everything relative to this fd from then on, so a workdir renamed
    or replaced by a symlink afterwards receives nothing.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        real = os.path.realpath(path)
        if not same_file(os.fstat(fd), os.stat(real)):
            raise UnsafePathError(f"the workspace directory {path!r} changed while it was opened")
    except BaseException:
        os.close(fd)
        raise
    return fd, real


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_dir(root: str | int, *parts: str, create: bool = False) -> int:
    """An fd of ``root/parts...``, each component opened without following symlinks;
    ``root`` a path, or the fd of a held root directory."""
    if isinstance(root, int):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root)
    else:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            created = create and make_dir(part, fd)
            try:
                nfd = os.open(part, DIRECTORY, dir_fd=fd)
            except OSError as exc:
                raise_unsafe(exc, "/".join(parts))
                raise
            os.close(fd)
            fd = nfd
            if created:
                make_private(fd, DIR_MODE)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(dir_fd: int, name: str, flags: int, where: str) -> int:
    """An fd of the regular file ``name`` (``where`` in messages), not through a symlink;
    created private when ``flags`` create it."""
    try:
        fd = os.open(name, flags, FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        raise_unsafe(exc, where)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{where} is not a regular file; refusing to use it")
    if flags & os.O_CREAT:
        make_private(fd, FILE_MODE)
    return fd


def read_file(root: str | int, parts: tuple[str, ...], name: str) -> bytes | None:
    """The bytes of ``root/parts.../name``, ``None`` if it does not exist."""
    reader = open_reader(root, parts, name)
    if reader is None:
        return None
    with reader:
        return reader.read()


def open_reader(root: str | int, parts: tuple[str, ...], name: str) -> BinaryIO | None:
    """A buffered reader of ``root/parts.../name`` (the caller closes it), ``None`` if it
    does not exist: for reading a window of a large file without loading it."""
    try:
        dfd = open_dir(root, *parts)
    except FileNotFoundError:
        return None
    try:
        fd = open_file(dfd, name, READ, "/".join((*parts, name)))
    except FileNotFoundError:
        return None
    finally:
        os.close(dfd)
    return os.fdopen(fd, "rb")


def stat_entries(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """Names and stats in a directory; a temporary removed meanwhile is skipped."""
    out = []
    for entry in os.scandir(dir_fd):
        try:
            out.append((entry.name, entry.stat(follow_symlinks=False)))
        except FileNotFoundError:
            continue
    return out


def make_dir(name: str, dir_fd: int) -> bool:
    """Create directory ``name``; whether this call created it."""
    try:
        os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def make_private(fd: int, mode: int) -> None:
    """Set ``mode`` exactly (the umask only ever removes bits from what ``open`` asked)."""
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) != mode and st.st_uid == os.geteuid():
        os.fchmod(fd, mode)


def raise_unsafe(exc: OSError, where: str) -> None:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
        raise UnsafePathError(
            f"{where} is a symlink or special file inside the workspace; refusing to follow it"
        ) from exc


def write_all(fd: int, payload: bytes | list[bytes]) -> None:
    """Write ``payload`` whole: bytes, or pieces (``_pieces.Chunks``) with ``writev``,
    as many as the OS takes per call."""
    if not isinstance(payload, list):
        payload = [payload]
    views = [memoryview(p) for p in payload if p]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if done:
            views[0] = views[0][done:]


_IOV_MAX = 512
"""Buffers per ``writev`` (POSIX allows at least 16; Linux 1024)."""


def write_new(dir_fd: int, name: str, payload: bytes | list[bytes], *, fsync: bool) -> None:
    fd = os.open(name, _NEW, FILE_MODE, dir_fd=dir_fd)
    try:
        make_private(fd, FILE_MODE)
        write_all(fd, payload)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def repair_tail(fd: int, where: str) -> None:
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
def flocked(dir_fd: int, op: int) -> Iterator[None]:
    fd = os.open(
        ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=dir_fd
    )
    try:
        make_private(fd, FILE_MODE)
        fcntl.flock(fd, op)
        yield
    finally:
        os.close(fd)


def collect_data(root: int, candidates: set[str], refs: str) -> None:
    """Delete the files of ``data/`` in ``candidates`` that no session's ``refs`` file
    names any more (under the data directory's exclusive lock; writers take it shared)."""
    ddfd = open_dir(root, "data")
    try:
        with flocked(ddfd, fcntl.LOCK_EX):
            sfd = open_dir(root, "sessions")
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
                    raw = read_file(root, ("sessions", key), refs)
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


def data_items(
    ddfd: int, names: list[str], owner: str | None
) -> list[tuple[ItemPath, int, str | None]]:
    """The data files ``names`` of the open ``data`` directory that are regular files."""
    out: list[tuple[ItemPath, int, str | None]] = []
    for name in names:
        try:
            item = parse_ref(f"data/{name}")
            st = os.stat(name, dir_fd=ddfd, follow_symlinks=False)
        except (UnsafePathError, FileNotFoundError):
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((item, st.st_size, owner))
    return out
