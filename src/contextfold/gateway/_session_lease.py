"""One decision at a time per conversation, across every replica on one store.

A decision is: read the conversation's state, work out what to forward (maybe a
compaction), save the new state. Two requests of one conversation deciding at once, on
one process or on two replicas behind a load balancer, would both start from the same
state and the later save would drop the earlier decision (a compaction lost, the prefix
changed twice). So a decision holds the conversation's lock in this process and, when the
store grants leases (:class:`~contextfold.workspace.SessionLease`: PostgreSQL, SQLite),
its lease in the store, for the length of the decision only (not of the upstream call).

The lease is renewed in the background while held, so a slow summary keeps it; a replica
that dies stops renewing, and another takes the conversation over after the lease's
``ttl``. Each grant carries a fencing token the store checks on every state write, and
the decision checks its lease before saving: a replica paused past its lease (a stopped
VM, a long GC) whose conversation was taken over cannot overwrite the newer state. It
fails that request instead (the gateway then fails open or closed as configured).

Waiting is bounded (``wait`` seconds, for the lock and the lease together): past it the
decision raises :class:`SessionBusy`. A wait longer than the lease's ``ttl`` outlasts the
lease of a replica killed mid-decision, so the client's retry on another replica is served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._exceptions import SessionLeasedError
from .._logging import logger
from ..workspace import Lease, SessionLease

if TYPE_CHECKING:
    from ._sessions import SessionState, SessionStates

__all__ = ["Held", "SessionBusy", "held"]


class SessionBusy(Exception):
    """The conversation was still held by another decision (here or on another replica)
    when the wait ran out."""


@dataclass
class Held:
    """A conversation held for one decision: its state when the hold began, and where to
    save the next one."""

    states: SessionStates
    key: str
    state: SessionState
    lease: Lease | None

    async def save(self, state: SessionState) -> None:
        """Save the decision's state; ``LeaseLostError`` if this replica's lease lapsed
        (the store's fence refuses it too if another replica took the conversation over).
        A state equal to the one the hold began with is not written again: a retried
        request costs the store no write."""
        if state == self.state:
            return
        if self.lease is not None:
            self.lease.check()
        await self.states.save(self.key, state)


@asynccontextmanager
async def held(states: SessionStates, key: str, lease_id: str) -> AsyncIterator[Held]:
    """Conversation ``key`` held (see the module docstring); ``lease_id`` is the store's
    session id of its state, the one the store fences writes on."""
    deadline = time.monotonic() + states.wait
    lock = states.lock(key)
    try:
        if states.wait <= 0 and lock.locked():
            raise TimeoutError
        await asyncio.wait_for(lock.acquire(), states.wait or None)
    except TimeoutError:
        raise SessionBusy(f"another request of this conversation held it {states.wait} s") from None
    try:
        lease = await _lease(states, lease_id, max(0.0, deadline - time.monotonic()))
        try:
            yield Held(states, key, await states.load(key), lease)
        finally:
            if lease is not None:
                await _release(lease)
    finally:
        lock.release()


async def _lease(states: SessionStates, lease_id: str, wait: float) -> Lease | None:
    store = states.store
    if not isinstance(store, SessionLease):
        return None
    try:
        return await store.acquire_lease(lease_id, ttl=states.lease_ttl, wait=wait)
    except SessionLeasedError as exc:
        raise SessionBusy(str(exc)) from None


async def _release(lease: Lease) -> None:
    """Give the lease up; a store that cannot be reached lets it expire instead (the
    decision was saved: failing the request for this would lose nothing but time)."""
    try:
        await lease.release()
    except Exception as exc:
        logger.warning("gateway: a session lease was not released (%s)", type(exc).__name__)
