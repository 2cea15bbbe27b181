"""Finding and loading recorded runs given as files or directories."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .._exceptions import MessageFormatError
from .._logging import logger
from ._loaders import ReadLimits, load_any
from ._trajectory import Trajectory

__all__ = ["LoadedRecordings", "find_recordings", "load_recordings"]

_SUFFIXES = (".json", ".jsonl", ".traj")


def find_recordings(paths: Iterable[str | Path]) -> list[Path]:
    """The files to load: each file as given, and every ``*.json`` / ``*.jsonl`` (which
    includes ``*.traj.json``, and SWE-agent's ``*.traj``) under each directory, recursively,
    sorted.

    Raises ``FileNotFoundError`` naming a path that does not exist.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.name.endswith(_SUFFIXES):
                    found.setdefault(child, None)
        elif path.is_file():
            found.setdefault(path, None)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return list(found)


@dataclass
class LoadedRecordings:
    """Runs loaded, each with the file it came from, and files skipped."""

    runs: list[tuple[Trajectory, str]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    """``(file, why)`` for files found in a directory that are not recordings."""


def load_recordings(
    paths: Iterable[str | Path], *, format: str | None = None, limits: ReadLimits | None = None
) -> LoadedRecordings:
    """Load every recording under ``paths`` (see :func:`find_recordings`).

    A file named explicitly must be a recording: otherwise ``MessageFormatError`` names it
    and the accepted formats. A file found in a directory that is not one is skipped, with
    the reason in :attr:`LoadedRecordings.skipped` (directories often hold other JSON).
    ``format`` (one of :data:`~contextfold.replay.FORMATS`) skips detection; ``limits``
    bound what is read of each file (a file over one is reported as not a recording).
    """
    given = [Path(p) for p in paths]
    explicit = {p for p in given if not p.is_dir()}
    loaded = LoadedRecordings()
    for file in find_recordings(given):
        try:
            runs = load_any(file, format=format, limits=limits)
        except (MessageFormatError, OSError, UnicodeDecodeError) as exc:
            if file in explicit:
                if isinstance(exc, MessageFormatError):
                    raise
                raise MessageFormatError(f"{file}: cannot be read: {exc}") from exc
            logger.info("skipping %s: %s", file, exc)
            loaded.skipped.append((file, str(exc)))
            continue
        loaded.runs.extend((run, str(file)) for run in runs)
    return loaded
