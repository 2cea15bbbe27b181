"""Output files of a replay, private like the workspace's: the request dumps, ``--json``
and the report hold (or name) conversation content, so a file is created ``0600`` and a
folder created for one ``0700``, whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

__all__ = ["FILE_MODE", "open_private", "private_dir", "write_private"]

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents ``0700``; folders that exist are left as
    they are (the user's)."""
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile: not ours
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a directory")


def open_private(path: Path) -> TextIO:
    """``path`` opened for writing text (UTF-8), emptied, ``0600`` (an existing file too,
    since it is rewritten whole); a symlink in its place is not followed."""
    private_dir(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as :func:`open_private` opens it."""
    with open_private(path) as file:
        file.write(text)
