"""Cancelling upstream work when the client goes away.

Starlette notices a disconnect only when it next writes to the client; a gateway waiting
on a slow upstream would keep that upstream request running for nobody. One task per
request listens for ``http.disconnect`` (started by the first guarded step, kept in the
ASGI scope for the next ones: sending upstream, then relaying the answer); the guarded
work runs in the request's own task, which the listener cancels if the client leaves
meanwhile, as ``asyncio.timeout`` cancels on its deadline. Before, each step ran its work
in a task of its own beside a listener task of its own (and the relay in an anyio task
group): four tasks and their wake-ups per relayed request, now one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.types import Receive, Scope

__all__ = ["ClientGone", "guarded", "race_disconnect", "stop_watching", "wait_disconnect"]

T = TypeVar("T")

_KEY = "contextfold.disconnect"
"""Where the request's listener is kept in its ASGI scope."""


class ClientGone(Exception):
    """The client disconnected; the work was cancelled."""


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (the body must already have been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class _Listener:
    """The request's listener: whether the client left, and the task to cancel if it
    leaves while that task runs guarded work."""

    __slots__ = ("cancelled", "gone", "guarded", "task")

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self.guarded: asyncio.Task[Any] | None = None
        self.cancelled = False
        """Whether this listener cancelled ``guarded`` (and no guard has taken it yet)."""
        self.task = asyncio.ensure_future(self._listen(receive))

    async def _listen(self, receive: Receive) -> None:
        await wait_disconnect(receive)
        self.gone = True
        if self.guarded is not None:
            self.cancelled = True
            self.guarded.cancel()


async def guarded(scope: Scope, receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` in this task; if the client disconnects first, cancel it and raise
    ``ClientGone``. (After the response's last byte the server reports a disconnect too:
    work that has returned by then is not affected.)"""
    listener: _Listener | None = scope.get(_KEY)
    if listener is None:
        listener = scope[_KEY] = _Listener(receive)
    if listener.gone:
        work.close()
        raise ClientGone
    task = asyncio.current_task()
    assert task is not None
    outer, listener.guarded = listener.guarded, task  # guards nest: a relayed stream
    try:  # may open another upstream round under its own guard
        return await work
    except asyncio.CancelledError:
        if not listener.cancelled:
            raise
        listener.cancelled = False
        if task.uncancel() > 0:  # cancelled by something else too: that goes on
            raise
        raise ClientGone from None
    finally:
        listener.guarded = outer


def stop_watching(scope: Scope) -> bool:
    """End the request's listener (its response is done); whether the client had left."""
    listener: _Listener | None = scope.pop(_KEY, None)
    if listener is None:
        return False
    listener.task.cancel()
    return listener.gone


async def race_disconnect(request: Request, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()``; if the client disconnects first, cancel it and raise ``ClientGone``."""

    async def run() -> T:
        return await work()

    return await guarded(request.scope, request.receive, run())
