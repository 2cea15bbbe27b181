"""Session leases on LocalWorkspace and SQLiteWorkspace (issue 28, point 4).

Before, only PostgreSQL leased: two agents running ``hold_session("job")`` on one Local or
SQLite store both got in, and the last save silently dropped the other's messages. Local
leases are an ``flock`` per session (dropped by the OS when the holder dies); SQLite's a
row claimed in ``BEGIN IMMEDIATE`` with an expiry. Both carry a growing fencing token,
and ``save_state`` refuses a writer that is not the holder.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from contextfold import LeaseLostError, SessionLeasedError
from contextfold.model import ScriptedModel
from contextfold.workspace import BaseWorkspace, LocalWorkspace, SessionLease, SQLiteWorkspace

from ..agent.agent_support import make_agent

Factory = Callable[[], Awaitable[BaseWorkspace]]


def _open(kind: str, path: Path) -> BaseWorkspace:
    if kind == "local":
        return LocalWorkspace(path / "ws", fsync=False)
    return SQLiteWorkspace(path / "ws.sqlite3", fsync=False)


@pytest.fixture(params=["local", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def workers(kind: str, tmp_path: Path) -> AsyncIterator[Factory]:
    """New instances over one store, as separate workers would have."""
    made: list[BaseWorkspace] = []

    async def new() -> BaseWorkspace:
        ws = _open(kind, tmp_path)
        await ws.initialize()
        made.append(ws)
        return ws

    yield new
    for ws in made:
        await ws.close()


def _leasing(ws: BaseWorkspace) -> SessionLease:
    assert isinstance(ws, SessionLease)
    return ws


async def test_two_agents_holding_one_session_the_second_is_refused(workers: Factory) -> None:
    a, b = await workers(), await workers()
    first = make_agent(ScriptedModel(["first answer"]), offloader=a)
    second = make_agent(ScriptedModel(["second answer"]), offloader=b)
    async with first.hold_session("job"):
        with pytest.raises(SessionLeasedError, match="'job' is being run by another worker"):
            async with second.hold_session("job"):
                await second.reply("second question")
        await first.reply("first question")
    async with second.hold_session("job") as resumed:  # released on exit
        assert resumed
        assert [m.text for m in second.engine.context] == ["first question", "first answer"]


async def test_one_instance_shared_by_two_agents_refuses_the_second(workers: Factory) -> None:
    ws = await workers()
    first = make_agent(ScriptedModel(["a"]), offloader=ws)
    second = make_agent(ScriptedModel(["b"]), offloader=ws)
    async with first.hold_session("job"):
        with pytest.raises(SessionLeasedError):
            async with second.hold_session("job"):
                pytest.fail("two agents held one session")


async def test_a_released_lease_is_granted_again_with_a_larger_token(workers: Factory) -> None:
    a, b = _leasing(await workers()), _leasing(await workers())
    first = await a.acquire_lease("s1", owner="worker-a")
    with pytest.raises(SessionLeasedError, match="worker-a"):
        await b.acquire_lease("s1")
    other = await b.acquire_lease("s2")  # other sessions are free
    await other.release()
    await first.release()
    second = await b.acquire_lease("s1")
    assert second.token > first.token
    await second.release()


async def test_a_waiting_worker_gets_the_lease_when_it_is_released(workers: Factory) -> None:
    a, b = _leasing(await workers()), _leasing(await workers())
    held = await a.acquire_lease("s1")
    asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(held.release()))
    lease = await b.acquire_lease("s1", wait=5)
    assert held.token < lease.token
    await lease.release()


async def test_renewal_keeps_a_lease_past_its_ttl(workers: Factory) -> None:
    a, b = _leasing(await workers()), _leasing(await workers())
    async with await a.acquire_lease("s1", ttl=0.4):
        await asyncio.sleep(1.0)
        with pytest.raises(SessionLeasedError):
            await b.acquire_lease("s1")


async def test_only_the_holder_may_save_the_state(workers: Factory) -> None:
    a, b = await workers(), await workers()
    async with await _leasing(a).acquire_lease("s1", owner="worker-a"):
        await a.save_state("s1", '{"by": "a"}')
        with pytest.raises(SessionLeasedError, match="worker-a"):
            await b.save_state("s1", '{"by": "b"}')
        assert await b.load_state("s1") == '{"by": "a"}'
    await b.save_state("s1", '{"by": "b"}')  # released: anyone may
    assert await a.load_state("s1") == '{"by": "b"}'


async def test_hostile_session_ids_get_leases(workers: Factory) -> None:
    a, b = _leasing(await workers()), _leasing(await workers())
    for sid in ("../x", "a\x00b", "x" * 1000, "🙂/..", "\udc80"):
        async with await a.acquire_lease(sid):
            with pytest.raises(SessionLeasedError):
                await b.acquire_lease(sid)


async def test_sqlite_a_worker_whose_lease_expired_and_was_taken_cannot_overwrite(
    tmp_path: Path,
) -> None:
    a, b = _open("sqlite", tmp_path), _open("sqlite", tmp_path)
    await a.initialize()
    await b.initialize()
    stale = await _leasing(a).acquire_lease("s1", ttl=0.3)
    await a.close()  # cut off from the file: no renewal, the lease expires
    taken = await _leasing(b).acquire_lease("s1", wait=5)
    await b.save_state("s1", '{"by": "b"}')
    await a.initialize()  # back, still believing it holds the session
    with pytest.raises(LeaseLostError, match="took the session over"):
        await a.save_state("s1", '{"by": "a"}')
    with pytest.raises(LeaseLostError):
        await stale.renew()
    assert await b.load_state("s1") == '{"by": "b"}'
    await stale.release()
    await taken.release()
    await a.close()
    await b.close()


async def test_local_lease_files_are_private_and_kept_by_purge(tmp_path: Path) -> None:
    ws = _open("local", tmp_path)
    await ws.initialize()
    first = await _leasing(ws).acquire_lease("s1")
    await ws.save_state("s1", "{}")
    await first.release()
    await ws.purge("s1")
    again = await _leasing(ws).acquire_lease("s1")
    assert again.token > first.token
    await again.release()
    files = list((tmp_path / "ws" / "leases").iterdir())
    assert [f.name for f in files] == ["s1"]
    assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
    await ws.close()


# -- two processes ---------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from contextfold.workspace import LocalWorkspace, SQLiteWorkspace

    async def main():
        kind, path, ttl = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
        if kind == "local":
            ws = LocalWorkspace(path / "ws", fsync=False)
        else:
            ws = SQLiteWorkspace(path / "ws.sqlite3", fsync=False)
        await ws.initialize()
        lease = await ws.acquire_lease("job", ttl=ttl, owner="child")
        print(lease.token, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _child(kind: str, path: Path, ttl: float) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, str(path), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"the child did not get the lease: {line!r}"
    return proc, int(line)


@pytest.mark.serial  # a wait < 0.5 s, measured alone
async def test_a_holder_in_another_process_refuses_then_its_sigkill_frees_the_lease(
    kind: str, tmp_path: Path
) -> None:
    ttl = 1.0
    proc, child_token = await asyncio.to_thread(_child, kind, tmp_path, ttl)
    ws = _open(kind, tmp_path)
    await ws.initialize()
    try:
        with pytest.raises(SessionLeasedError, match="child"):
            await _leasing(ws).acquire_lease("job")
        with pytest.raises(SessionLeasedError, match="child"):
            await ws.save_state("job", '{"by": "parent"}')
        await asyncio.sleep(ttl * 1.5)  # renewed by the child: still held
        with pytest.raises(SessionLeasedError):
            await _leasing(ws).acquire_lease("job")
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        started = time.monotonic()
        lease = await _leasing(ws).acquire_lease("job", wait=ttl * 5)
        waited = time.monotonic() - started
        assert lease.token > child_token
        if kind == "local":
            assert waited < 0.5  # the OS dropped the dead holder's flock at once
        await ws.save_state("job", '{"by": "parent"}')
        await lease.release()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await ws.close()


async def test_local_a_state_write_in_progress_delays_a_grant_but_does_not_refuse_it(
    tmp_path: Path,
) -> None:
    import fcntl

    ws = _open("local", tmp_path)
    await ws.initialize()
    await ws.save_state("s1", "{}")  # creates leases/s1
    fd = os.open(tmp_path / "ws" / "leases" / "s1", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # what a non-holder's save_state holds meanwhile
    asyncio.get_running_loop().call_later(0.2, os.close, fd)
    lease = await _leasing(ws).acquire_lease("s1")  # wait=0: still granted
    await lease.release()
    await ws.close()
