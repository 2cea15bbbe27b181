"""The registry of recording formats, and loading a file in any of them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from ..._exceptions import MessageFormatError
from .._trajectory import Trajectory
from ._atif import ATIF
from ._claude_code import CLAUDE_CODE
from ._codex import CODEX
from ._mini_swe import MINI_SWE_AGENT
from ._msg_jsonl import MSG_JSONL
from ._openai import OPENAI, OPENAI_RUNS
from ._openhands import OPENHANDS
from ._pydantic_ai import PYDANTIC_AI
from ._recording import (
    DESCRIBED,
    BadLine,
    Loader,
    NotThisFormat,
    OverLimit,
    ReadLimits,
    Recording,
    not_this,
)
from ._swe_agent import SWE_AGENT

__all__ = ["FORMATS", "load_any"]

FORMATS: Mapping[str, Loader] = MappingProxyType(
    {
        loader.name: loader
        for loader in (
            MINI_SWE_AGENT,
            OPENAI_RUNS,
            OPENAI,
            MSG_JSONL,
            CLAUDE_CODE,
            CODEX,
            OPENHANDS,
            SWE_AGENT,
            ATIF,
            PYDANTIC_AI,
        )
    }
)
"""What ``load_any(..., format=...)`` and ``contextfold replay --format`` accept: each
format's name and its :class:`Loader`."""

# The order detection tries: the first format a file fits wins (a list of runs is also a
# list of messages; a message of a Pydantic AI history may also have a role).
_DETECTION: tuple[Loader, ...] = (
    MINI_SWE_AGENT,
    OPENAI_RUNS,
    ATIF,
    PYDANTIC_AI,
    SWE_AGENT,
    OPENAI,
    MSG_JSONL,
    CLAUDE_CODE,
    CODEX,
    OPENHANDS,
)


def load_any(
    path: str | Path, *, format: str | None = None, limits: ReadLimits | None = None
) -> list[Trajectory]:
    """Load any supported recording (:data:`FORMATS`), telling the format from the content
    unless ``format`` names it, within ``limits`` (default :class:`ReadLimits`).

    Raises ``MessageFormatError`` naming the file and the formats it knows otherwise, and
    naming the file and the limit for a file over one (or binary).
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise MessageFormatError(
            f"unknown format {format!r}; accepted formats: {', '.join(FORMATS)}"
        )
    recording = Recording(path, limits=limits)
    try:
        if format is not None:
            return _load_as(recording, FORMATS[format])
        return _detect_and_load(recording)
    except BadLine as bad:
        raise MessageFormatError(f"{bad}; {_accepted()}") from bad.__cause__
    except RecursionError as exc:  # a loader's own recursion over a value within the limit
        depth = recording.limits.max_depth
        raise OverLimit(
            f"{path}: nested too deeply to read (lower ReadLimits.max_depth, now {depth:,})"
        ) from exc


def _load_as(recording: Recording, loader: Loader) -> list[Trajectory]:
    if loader.kind != recording.kind:
        recording.parsed()  # read as its suffix says: a malformed file is reported as such
        raise not_this(recording, loader.name)
    return loader.load(recording)


def _detect_and_load(recording: Recording) -> list[Trajectory]:
    """The runs of the first format, in detection order, whose loader takes the file: each
    loader checks the file's shape once, as it loads it."""
    for loader in _DETECTION:
        if loader.kind == recording.kind:
            try:
                return loader.load(recording)
            except NotThisFormat:
                continue
    raise MessageFormatError(f"{recording.path}: unrecognised recording; {_accepted()}")


def _accepted() -> str:
    return "accepted formats: " + ", ".join(FORMATS) + f" ({DESCRIBED})"
