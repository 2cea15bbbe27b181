"""Cancelling upstream work when the client goes away.

Starlette notices a disconnect only when it next writes to the client; a gateway waiting
on a slow upstream would keep that upstream request running for nobody. These helpers
listen for ``http.disconnect`` beside the work and cancel the work when it arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.types import Receive

__all__ = ["ClientGone", "race_disconnect", "wait_disconnect"]

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected; the work was cancelled."""


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (the body must already have been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work``; if the client disconnects first, cancel it and raise ``ClientGone``."""
    task: asyncio.Task[T] = asyncio.ensure_future(work())
    watcher: asyncio.Task[Any] = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientGone
