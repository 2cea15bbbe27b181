"""A recording file as the loaders read it, and the protocol every loader follows."""

from __future__ import annotations

import codecs
import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
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
    "OverLimit",
    "ReadLimits",
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


class OverLimit(MessageFormatError):
    """A recording over one of its :class:`ReadLimits`, or not text at all: reported as it
    is (no other format is tried)."""


_MB = 1024 * 1024


@dataclass(frozen=True)
class ReadLimits:
    """How much of a recording is read before it is refused, so a hostile or mistaken
    input (a 1 GB log, a core dump, JSON nested 100,000 deep) fails at once with a
    one-line error naming the file and the limit, instead of after minutes and gigabytes
    or with a ``RecursionError``.

    Defaults fit every real recording seen (the largest, Claude Code sessions, are tens
    of MB); raise them for larger ones (``replay --max-file-mb``, ``--max-line-mb``,
    ``--max-depth``).
    """

    max_bytes: int = 256 * _MB
    """A file larger is refused before it is read."""
    max_line: int = 64 * _MB
    """A JSONL line longer (in characters) is refused."""
    max_depth: int = 256
    """JSON nested deeper (arrays and objects within each other) is refused."""

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_line", "max_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"ReadLimits.{name} must be positive, not {getattr(self, name)}")


_SNIFF = 8192  # bytes looked at to tell a binary file


def _binary(head: bytes) -> str | None:
    """Why ``head`` (a file's first bytes) is not UTF-8 text, or ``None`` when it is: the
    first NUL byte or invalid UTF-8 (a character cut at the end of ``head`` is not)."""
    nul = head.find(b"\x00")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as exc:
        if nul == -1 or exc.start < nul:
            return f"invalid UTF-8 at byte {exc.start}"
    return None if nul == -1 else f"a NUL byte at byte {nul}"


def depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects deeper than ``limit``;
    without recursion, so any depth is measured."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


class Recording:
    """A recording file: its path, and its text read and parsed once, on first use, for
    every loader that looks at it.

    ``text`` gives the content instead of reading ``path`` (which then only names it in
    messages), e.g. to load a prefix of a file. ``limits`` bound what is read and parsed
    (:class:`OverLimit` names the file and the limit).
    """

    def __init__(
        self, path: str | Path, text: str | None = None, *, limits: ReadLimits | None = None
    ) -> None:
        self.path = Path(path)
        self._given = text
        self.limits = limits or ReadLimits()

    @property
    def kind(self) -> RecordingKind:
        """``jsonl`` for a ``.jsonl`` file, else ``json``."""
        return "jsonl" if self.path.suffix == ".jsonl" else "json"

    @cached_property
    def text(self) -> str:
        """The content, as UTF-8 (a file that is not raises ``UnicodeDecodeError``), within
        the limits: a file over ``max_bytes`` is not read, one that starts with bytes no
        text has (NUL, invalid UTF-8) is refused after ``8 KiB``, a JSONL line over
        ``max_line`` is refused."""
        text = self._given if self._given is not None else self._read()
        if self.kind == "jsonl" and len(text) > self.limits.max_line:
            self._check_lines(text)
        return text

    def _read(self) -> str:
        limit = self.limits.max_bytes
        with self.path.open("rb") as file:
            size = self.path.stat().st_size
            if size > limit:
                raise OverLimit(
                    f"{self.path}: {size:,} bytes, over the limit of {limit:,} "
                    "(ReadLimits.max_bytes, replay --max-file-mb)"
                )
            head = file.read(_SNIFF)
            why = _binary(head)
            if why is not None:
                raise OverLimit(f"{self.path}: a binary file, not a JSON recording ({why})")
            data = head + file.read(limit + 1 - len(head))  # it may have grown
        if len(data) > limit:
            raise OverLimit(
                f"{self.path}: over the limit of {limit:,} bytes "
                "(ReadLimits.max_bytes, replay --max-file-mb)"
            )
        return data.decode("utf-8")

    def _check_lines(self, text: str) -> None:
        limit = self.limits.max_line
        # anchored at line starts: one attempt a line, not one a character
        long = re.search(f"(?m)^[^\\n]{{{limit + 1}}}", text)
        if long is not None:
            n = text.count("\n", 0, long.start()) + 1
            raise OverLimit(
                f"{self.path}:{n}: a line over the limit of {limit:,} characters "
                "(ReadLimits.max_line, replay --max-line-mb)"
            )

    def _parse(self, text: str, where: str) -> Any:
        """``text`` as JSON, within ``max_depth``; ``ValueError`` when it is not JSON."""
        limit = self.limits.max_depth
        try:
            value = json.loads(text)
        except RecursionError:
            value = None  # deeper than the parser goes: deeper than any limit allowed
        else:
            if not depth_over(value, limit):
                return value
        raise OverLimit(
            f"{where}: JSON nested deeper than the limit of {limit:,} levels "
            "(ReadLimits.max_depth, replay --max-depth)"
        )

    @cached_property
    def document(self) -> Any:
        """The file as one JSON value (a file that is not UTF-8 is not valid JSON either)."""
        try:
            return self._parse(self.text, str(self.path))
        except OverLimit:
            raise
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
                row = self._parse(line, f"{self.path}:{n}")
            except OverLimit:
                raise
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
