"""Session leases: at most one worker runs a session at a time.

A lease is granted by the store (``PostgresWorkspace`` and ``SQLiteWorkspace``: a row per
session with an expiry, in the database's time; ``LocalWorkspace``: an ``flock`` on a file
per session, which the OS drops when the holder dies), renewed in the background while
held, and released when done. A worker
that dies stops renewing, so its lease expires after ``ttl`` seconds and another worker
may take the session over. Each grant carries a fencing token that grows with every
grant; the store refuses a state write from anyone but the current holder, so a worker
that was paused past its expiry cannot overwrite the state of the worker that took over.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from .._exceptions import LeaseLostError, SessionLeasedError
from .._logging import logger

__all__ = [
    "Lease",
    "LeaseBackend",
    "LeaseHolder",
    "SessionLease",
    "acquire_lease",
    "check_fence",
    "worker_name",
]


@runtime_checkable
class SessionLease(Protocol):
    """A store that grants per-session leases (``PostgresWorkspace``, ``SQLiteWorkspace``
    and ``LocalWorkspace``)."""

    async def acquire_lease(
        self, session_id: str, *, ttl: float = 30.0, wait: float = 0.0, owner: str | None = None
    ) -> Lease:
        """Take the session's lease, waiting up to ``wait`` seconds for the holder to
        release it or let it expire; ``SessionLeasedError`` if it is still held then."""
        ...


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease, and until when (server time)."""

    owner: str
    expires_at: datetime


class LeaseBackend(Protocol):
    """The three primitives a store implements; :func:`acquire_lease` does the rest."""

    async def _lease_try(self, session_id: str, owner: str, ttl: float) -> int | LeaseHolder:
        """Grant the lease (return the new fencing token) or say who holds it."""
        ...

    async def _lease_renew(self, session_id: str, token: int, ttl: float) -> bool:
        """Extend a held lease; False if it was taken over."""
        ...

    async def _lease_release(self, session_id: str, token: int) -> None:
        """Give the lease up (a no-op if it was taken over)."""
        ...


def worker_name() -> str:
    """``host:pid:random``, naming this worker in lease errors."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Lease(contextlib.AbstractAsyncContextManager["Lease"]):
    """A held session lease, renewed every ``ttl / 3`` seconds until :meth:`release`.

    Use it as an async context manager, or call :meth:`release`. :attr:`lost` turns true
    when a renewal finds the lease taken over; the store's fencing refuses this worker's
    state writes from then on (``LeaseLostError``). Call :meth:`check` before acting on
    the outside world (a tool call): it also fails once ``ttl`` has passed, by this
    process's clock, since the last renewal succeeded, so a worker that was paused (a
    long GC, a stopped VM) stops before it repeats work another worker took over.
    """

    def __init__(
        self,
        backend: LeaseBackend,
        session_id: str,
        token: int,
        owner: str,
        ttl: float,
        *,
        granted_at: float,
    ) -> None:
        self.session_id = session_id
        self.token = token
        """The fencing token: larger for every later grant of this session's lease."""
        self.owner = owner
        self.ttl = ttl
        self.lost = False
        self._backend = backend
        self._valid_until = granted_at + ttl
        self._task: asyncio.Task[None] | None = asyncio.create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.renew()
            except LeaseLostError:
                logger.error("the lease of session %r was taken over", self.session_id)
                return
            except Exception as exc:  # the store is unreachable: try again, it may recover
                logger.warning("could not renew the lease of %r: %s", self.session_id, exc)

    async def renew(self) -> None:
        """Extend the lease now; ``LeaseLostError`` if it was taken over."""
        asked = time.monotonic()  # the server's expiry is later than this plus ttl
        if not await self._backend._lease_renew(self.session_id, self.token, self.ttl):
            self.lost = True
            raise LeaseLostError(
                f"the lease of session {self.session_id!r} was taken over by another worker"
            )
        self._valid_until = asked + self.ttl

    def check(self) -> None:
        """``LeaseLostError`` unless the lease is certainly still held."""
        if self.lost or time.monotonic() >= self._valid_until:
            self.lost = True
            raise LeaseLostError(
                f"this worker's lease on session {self.session_id!r} lapsed (not renewed "
                f"within {self.ttl} s, or taken over); stop running the session here"
            )

    async def release(self) -> None:
        """Stop renewing and give the lease up; idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not self.lost:
            await self._backend._lease_release(self.session_id, self.token)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"Lease(session_id={self.session_id!r}, token={self.token}, owner={self.owner!r})"


async def acquire_lease(
    backend: LeaseBackend,
    session_id: str,
    *,
    ttl: float = 30.0,
    wait: float = 0.0,
    owner: str | None = None,
) -> Lease:
    """Take ``session_id``'s lease from ``backend``, polling up to ``wait`` seconds."""
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl}")
    owner = owner or worker_name()
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        asked = time.monotonic()
        got = await backend._lease_try(session_id, owner, ttl)
        if isinstance(got, int):
            return Lease(backend, session_id, got, owner, ttl, granted_at=asked)
        left = deadline - time.monotonic()
        if left <= 0:
            raise SessionLeasedError(
                f"session {session_id!r} is being run by another worker ({got.owner}), whose "
                f"lease runs until {got.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed; "
                "retry later, or pass wait=<seconds> to wait for it"
            )
        await asyncio.sleep(min(left, max(0.05, ttl / 10)))


def check_fence(
    session_id: str,
    row: tuple[int, LeaseHolder, bool] | None,
    *,
    held: int | None,
    was_lost: bool,
) -> None:
    """Refuse a state write from anyone but the session's lease holder, if it has one.

    ``row``: the session's lease as stored (token, holder, whether it is live), ``None``
    if it was never leased; ``held``: the token this instance was granted, if any;
    ``was_lost``: this instance held the lease until a renewal found it taken over.
    """
    if row is None or row[0] == held:
        return
    _, holder, live = row
    if held is not None or was_lost:
        raise LeaseLostError(
            f"this worker's lease on session {session_id!r} was lost: it expired and "
            f"{holder.owner} took the session over; stop running it here (its state "
            "would overwrite the new worker's)"
        )
    if live:
        raise SessionLeasedError(
            f"session {session_id!r} is leased by another worker ({holder.owner}) until "
            f"{holder.expires_at:%Y-%m-%d %H:%M:%S} UTC; only the lease holder may save "
            "its state"
        )
