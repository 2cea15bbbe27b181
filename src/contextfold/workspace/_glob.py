"""A glob over a workspace's items that stops at its cap, in path order.

Listing every item to show the first 200 built some 400,000 objects for 114,000 sessions;
the cyclic collector's full passes over them ran in the listing thread holding the GIL
(and so the event loop) for 100 to 270 ms. A backend that can give its items lazily, in
path order, hands :func:`first_matches` an iterator instead: sessions are taken from a
heap of their names one at a time, so only the items shown (and one more, to know that
more match) are ever built. A pattern that names one session (``sessions/<key>/...``)
lists only that session.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias

import regex

from .._exceptions import UnsafePathError
from ._grep import GLOB_TIMEOUT
from ._names import CONTEXT_FILE, ItemPath, parse_ref
from ._types import ItemInfo, ItemPage

__all__ = ["Listed", "first_matches", "in_path_order", "pattern_session"]

Listed: TypeAlias = tuple[ItemPath, int, str | None]
"""``(item, size, session id)``, as the backends list them."""

_WILD = frozenset("*?[")


def pattern_session(pattern: str) -> str | None:
    """The session key a glob is confined to (``sessions/<key>/...`` with a literal key),
    else ``None``; ``""`` when that key is no valid key (nothing can match)."""
    parts = pattern.split("/")
    if len(parts) < 3 or parts[0] != "sessions" or _WILD & set(parts[1]):
        return None
    try:
        parse_ref(f"sessions/{parts[1]}/{CONTEXT_FILE}")
    except UnsafePathError:
        return ""
    return parts[1]


def in_path_order(
    data: Iterable[Listed], keys: Iterable[str], items_of: Callable[[str], Iterable[Listed]]
) -> Iterator[Listed]:
    """``data`` (already in order), then each session's items (``items_of(key)``, any
    order), sessions taken in path order from a heap of ``keys``: ``sessions/a/x`` sorts
    as ``a/`` does among the keys, since no key holds ``/``."""
    yield from data
    heap = [f"{k}/" for k in keys]
    heapq.heapify(heap)
    while heap:
        key = heapq.heappop(heap)[:-1]
        yield from sorted(items_of(key), key=lambda listed: listed[0].name)


def first_matches(
    listed: Iterable[Listed],
    matcher: regex.Pattern[str],
    limit: int,
    time_limit: float,
    display: Callable[[str], str],
) -> ItemPage:
    """The first ``limit`` items of ``listed`` whose path fully matches ``matcher``;
    ``TimeoutError`` when matching (not listing) takes over ``time_limit`` seconds."""
    shown: list[ItemInfo] = []
    spent = 0.0
    for item, size, sid in listed:
        start = time.monotonic()
        try:
            hit = matcher.fullmatch(item.rel, timeout=max(time_limit - spent, 1e-6))
        except TimeoutError:
            hit = None
            spent = time_limit
        spent += time.monotonic() - start
        if spent >= time_limit:
            raise TimeoutError(GLOB_TIMEOUT.format(seconds=f"{time_limit:g}"))
        if hit is None:
            continue
        if len(shown) == limit:
            return ItemPage(tuple(shown), more=True)
        ref = display(item.rel)
        shown.append(ItemInfo(ref=ref, path=item.rel, kind=item.kind, size=size, session_id=sid))
    return ItemPage(tuple(shown), more=False)
