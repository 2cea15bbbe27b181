"""A recording file as the loaders read it, and the protocol every loader follows."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol, assert_never

from ..._exceptions import MessageFormatError
from ...message import Msg
from .._trajectory import Trajectory

__all__ = [
    "DESCRIBED",
    "BadLine",
    "Loader",
    "NotThisFormat",
    "Recording",
    "RecordingKind",
    "ShapedLoader",
    "not_this",
    "split_system",
]

RecordingKind = Literal["json", "jsonl"]
"""One JSON document, or one JSON value a line (JSONL): told by the file's suffix."""

DESCRIBED = (
    "mini-swe-agent .traj.json, a JSON list of tau-bench style runs (objects with 'traj'), "
    "a JSON list of OpenAI messages, JSONL of Msg objects, Claude Code session JSONL, Codex "
    "rollout JSONL, OpenHands output.jsonl, SWE-agent .traj, ATIF trajectory JSON"
)
"""The formats in words, for the messages of files that are none of them."""


class NotThisFormat(MessageFormatError):
    """A loader's answer to a recording in another format: detection tries the next one,
    a format named by the caller reports it."""


class BadLine(MessageFormatError):
    """A JSONL line that is not JSON; ``load_any`` adds the accepted formats to it."""


class Recording:
    """A recording file: its path, and its text read and parsed once, on first use, for
    every loader that looks at it.

    ``text`` gives the content instead of reading ``path`` (which then only names it in
    messages), e.g. to load a prefix of a file.
    """

    def __init__(self, path: str | Path, text: str | None = None) -> None:
        self.path = Path(path)
        self._given = text

    @property
    def kind(self) -> RecordingKind:
        """``jsonl`` for a ``.jsonl`` file, else ``json``."""
        return "jsonl" if self.path.suffix == ".jsonl" else "json"

    @cached_property
    def text(self) -> str:
        """The content, as UTF-8 (a file that is not raises ``UnicodeDecodeError``)."""
        return self._given if self._given is not None else self.path.read_text(encoding="utf-8")

    @cached_property
    def document(self) -> Any:
        """The file as one JSON value (a file that is not UTF-8 is not valid JSON either)."""
        try:
            return json.loads(self.text)
        except ValueError as exc:
            raise MessageFormatError(
                f"{self.path}: not valid JSON ({exc}); accepted formats: {DESCRIBED}"
            ) from exc

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        """The objects of a JSONL file, one a line; blank lines and other values skipped."""
        rows: list[dict[str, Any]] = []
        for n, line in enumerate(self.text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise BadLine(f"{self.path}:{n}: not a JSON line ({exc})") from exc
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def parsed(self, kind: RecordingKind | None = None) -> Any:
        """The file parsed as ``kind`` (default: as its suffix says): :attr:`document` or
        :attr:`rows`."""
        kind = kind or self.kind
        if kind == "json":
            return self.document
        if kind == "jsonl":
            return self.rows
        assert_never(kind)

    def __repr__(self) -> str:
        return f"Recording({str(self.path)!r})"


class Loader(Protocol):
    """One recording format: reads its files as runs, and tells a file in another format
    by raising ``MessageFormatError`` (it checks the file's shape once, as it loads it)."""

    @property
    def name(self) -> str:
        """The format's name in :data:`~contextfold.replay.FORMATS` and ``--format``."""
        ...

    @property
    def kind(self) -> RecordingKind:
        """The files it reads: ``json`` (one document) or ``jsonl`` (a value a line)."""
        ...

    def load(self, recording: Recording) -> list[Trajectory]:
        """The runs ``recording`` holds, in order."""
        ...


class ShapedLoader(ABC):
    """A loader that tells its format by the shape of the parsed file: ``fits`` checks it,
    once, then ``read`` reads it."""

    name: str
    kind: RecordingKind

    def load(self, recording: Recording) -> list[Trajectory]:
        parsed = recording.parsed(self.kind)
        if not self.fits(parsed):
            raise not_this(recording, self.name)
        return self.read(recording, parsed)

    @abstractmethod
    def fits(self, parsed: Any) -> bool:
        """Whether the parsed file has this format's shape."""

    @abstractmethod
    def read(self, recording: Recording, parsed: Any) -> list[Trajectory]:
        """The runs of a file that fits."""


def not_this(recording: Recording, name: str) -> NotThisFormat:
    return NotThisFormat(f"{recording.path}: not a {name} recording")


def split_system(
    msgs: list[Msg], *, instance_id: str, info: dict[str, Any], fmt: str
) -> Trajectory:
    """A run whose leading system message (one without metadata) is its system prompt."""
    system: str | None = None
    if msgs and msgs[0].role == "system" and not msgs[0].metadata:
        system = msgs[0].text
        msgs = msgs[1:]
    return Trajectory(instance_id=instance_id, system=system, messages=msgs, info=info, format=fmt)
