"""The keys of a session's objects in the bucket, and what a LIST of them shows.

See :class:`contextfold.workspace.S3Workspace` for the whole layout.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ._names import parse_ref
from ._s3_client import S3Objects

__all__ = [
    "INDEX",
    "Listed",
    "Tip",
    "by_session",
    "index_key",
    "is_data_name",
    "layout",
    "segment_key",
]

_SEGMENT_DIGITS = 12
INDEX = "index.json"
"""The name of a session's segment index, in its ``context/`` folder."""


def segment_key(skey: str, n: int) -> str:
    """The key of segment ``n`` of the session's context log."""
    return f"sessions/{skey}/context/{n:0{_SEGMENT_DIGITS}d}.jsonl"


def index_key(skey: str) -> str:
    """The key of the session's segment index."""
    return f"sessions/{skey}/context/{INDEX}"


@dataclass(frozen=True)
class Tip:
    """What the search index holds of one session's log: its first ``segments`` segments,
    ``size`` bytes, read while its index named the log ``log`` (``None``: unnamed); and
    the ETag of an index version that names it so (a listing that shows that ETag proves
    the id without a GET)."""

    segments: int
    size: int
    log: str | None
    etag: str | None


@dataclass
class Listed:
    """One session's objects in a listing."""

    segments: dict[int, int] = field(default_factory=dict)
    """Context segment number -> size."""
    tools: dict[str, int] = field(default_factory=dict)
    """Tool-result file name -> size."""
    data: list[str] = field(default_factory=list)
    """Names of the data the session references."""
    head: str | None = None
    """The ETag of ``context/index.json``, if listed."""
    start: int = 0
    """The listing skipped segments 0 to ``start - 1``: the index holds them (``tip``)."""
    tip: Tip | None = None
    """The session's tip when the listing began."""

    def log(self) -> list[int]:
        """The sizes of the readable log from segment ``start`` up to the first gap."""
        sizes: list[int] = []
        while self.start + len(sizes) in self.segments:
            sizes.append(self.segments[self.start + len(sizes)])
        return sizes


def by_session(listing: Iterable[tuple[str, int, str]], skey: str | None) -> dict[str, Listed]:
    """A listing of ``sessions/`` (or of the session ``skey``'s folder), by session key."""
    out: dict[str, Listed] = {}
    for key, size, etag in listing:
        if skey is not None:
            key = f"{skey}/{key}"
        owner, _, rest = key.partition("/")
        listed = out.setdefault(owner, Listed())
        if rest.startswith("context/") and rest.endswith(".jsonl"):
            number = rest[len("context/") : -len(".jsonl")]
            if number.isdigit():
                listed.segments[int(number)] = size
        elif rest == f"context/{INDEX}":
            listed.head = etag
        elif rest.startswith("data/"):
            listed.data.append(rest[len("data/") :])
        elif rest.startswith("tool_result-"):
            try:
                parse_ref(f"sessions/{owner}/{rest}")
            except ValueError:
                continue
            listed.tools[rest] = size
    return out


async def layout(objects: S3Objects, skey: str | None) -> dict[str, Listed]:
    """What one LIST shows under ``sessions/`` (or one session's folder), by key."""
    prefix = "sessions/" if skey is None else f"sessions/{skey}/"
    return by_session(await objects.list_range(prefix), skey)


def is_data_name(name: str) -> bool:
    """Whether ``name`` names a data file (``{sha256}.{ext}``)."""
    try:
        return parse_ref(f"data/{name}").kind == "data"
    except ValueError:
        return False
