"""Holding a session: where its state is saved after every step, and the lease it is
held under."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from ..workspace import Lease, Offloader, SessionLease, SessionStore

__all__ = ["Checkpoints", "session_store", "take_lease"]


class Checkpoints:
    """While a session is held, the store its state is saved to after every step, and
    its lease (if any), checked before each tool call and save."""

    def __init__(self, save: Callable[[SessionStore], Awaitable[None]]) -> None:
        self._save = save
        self._store: SessionStore | None = None
        self._lease: Lease | None = None

    @contextmanager
    def held(self, store: SessionStore, lease: Lease | None) -> Iterator[None]:
        self._store, self._lease = store, lease
        try:
            yield
        finally:
            self._store = self._lease = None

    def check_lease(self) -> None:
        """Raise ``LeaseLostError`` once the lease lapsed: such a worker must not act."""
        if self._lease is not None:
            self._lease.check()

    async def save(self) -> None:
        """Save the state when held (after checking the lease); nothing otherwise."""
        self.check_lease()
        if self._store is not None:
            await self._save(self._store)


def session_store(offloader: Offloader, store: SessionStore | None) -> SessionStore:
    """``store``, else the offloader when it can store sessions."""
    if store is not None:
        return store
    if isinstance(offloader, SessionStore):
        return offloader
    raise ValueError(
        "no session store: pass store=..., or use a workspace (e.g. LocalWorkspace) "
        "as the offloader"
    )


async def take_lease(
    store: SessionStore, session_id: str, *, ttl: float, wait: float
) -> Lease | None:
    """The session's lease, when ``store`` grants leases; None otherwise."""
    if isinstance(store, SessionLease):
        return await store.acquire_lease(session_id, ttl=ttl, wait=wait)
    return None
