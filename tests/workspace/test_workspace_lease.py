"""Session leases on PostgreSQL: one holder at a time, expiry, fencing of state writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from contextfold import LeaseLostError, SessionLeasedError
from contextfold.workspace import PostgresWorkspace, SessionLease

Factory = Callable[[], Awaitable[PostgresWorkspace]]


@pytest.fixture
async def workers(pg_dsn: str, pg_prefix: str) -> AsyncIterator[Factory]:
    """Makes workspaces over one database, as separate workers would have."""
    made: list[PostgresWorkspace] = []

    async def new() -> PostgresWorkspace:
        ws = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=2)
        await ws.initialize()
        made.append(ws)
        return ws

    yield new
    for ws in made:
        await ws.close()


async def test_postgres_workspace_grants_leases(workers: Factory) -> None:
    assert isinstance(await workers(), SessionLease)


async def test_a_second_worker_gets_a_clear_error(workers: Factory) -> None:
    a, b = await workers(), await workers()
    async with await a.acquire_lease("s1", owner="worker-a"):
        with pytest.raises(SessionLeasedError, match=r"'s1' is being run by .*worker-a"):
            await b.acquire_lease("s1")
        other = await b.acquire_lease("s2")  # other sessions are free
        await other.release()


async def test_a_released_lease_is_granted_again_with_a_larger_token(workers: Factory) -> None:
    a, b = await workers(), await workers()
    first = await a.acquire_lease("s1")
    await first.release()
    second = await b.acquire_lease("s1")
    assert second.token > first.token
    await second.release()


async def test_a_waiting_worker_gets_the_lease_when_it_is_released(workers: Factory) -> None:
    a, b = await workers(), await workers()
    held = await a.acquire_lease("s1")
    asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(held.release()))
    lease = await b.acquire_lease("s1", wait=5)
    assert held.token < lease.token
    await lease.release()


async def test_renewal_keeps_a_lease_past_its_ttl(workers: Factory) -> None:
    a, b = await workers(), await workers()
    async with await a.acquire_lease("s1", ttl=0.4):
        await asyncio.sleep(1.0)
        with pytest.raises(SessionLeasedError):
            await b.acquire_lease("s1")


async def test_only_the_holder_may_save_the_state(workers: Factory) -> None:
    a, b = await workers(), await workers()
    async with await a.acquire_lease("s1", owner="worker-a"):
        await a.save_state("s1", '{"by": "a"}')
        with pytest.raises(SessionLeasedError, match="worker-a"):
            await b.save_state("s1", '{"by": "b"}')
    await b.save_state("s1", '{"by": "b"}')  # released: anyone may
    assert await a.load_state("s1") == '{"by": "b"}'


async def test_a_worker_whose_lease_expired_and_was_taken_cannot_overwrite(
    workers: Factory,
) -> None:
    a, b = await workers(), await workers()
    stale = await a.acquire_lease("s1", ttl=0.3)
    await a.close()  # cut off from the database: no renewal, the lease expires
    taken = await b.acquire_lease("s1", wait=5)
    await b.save_state("s1", '{"by": "b"}')
    await a.initialize()  # back, still believing it holds the session
    with pytest.raises(LeaseLostError, match="took the session over"):
        await a.save_state("s1", '{"by": "a"}')
    with pytest.raises(LeaseLostError):
        await stale.renew()
    assert stale.lost
    assert await b.load_state("s1") == '{"by": "b"}'
    await stale.release()
    await taken.release()


async def test_leases_survive_purge_so_tokens_never_repeat(workers: Factory) -> None:
    a = await workers()
    first = await a.acquire_lease("s1")
    await first.release()
    await a.save_state("s1", "{}")
    await a.purge("s1")
    again = await a.acquire_lease("s1")
    assert again.token > first.token
    await again.release()


async def test_hostile_session_ids_get_leases(workers: Factory) -> None:
    a, b = await workers(), await workers()
    for sid in ("../x", "a\x00b", "x" * 1000, "🙂/.."):
        async with await a.acquire_lease(sid):
            with pytest.raises(SessionLeasedError):
                await b.acquire_lease(sid)


async def test_bad_ttl_is_refused(workers: Factory) -> None:
    with pytest.raises(ValueError, match="ttl"):
        await (await workers()).acquire_lease("s1", ttl=0)


async def test_a_lease_not_renewed_within_its_ttl_fails_its_check(workers: Factory) -> None:
    a = await workers()
    lease = await a.acquire_lease("s1", ttl=0.3)
    lease.check()
    await a.close()  # renewals fail from here on
    await asyncio.sleep(0.4)
    with pytest.raises(LeaseLostError, match="lapsed"):
        lease.check()
    await lease.release()
