"""Gateway figure: what one transparent-mode decision's state handling costs per store
(issue 29, point 5): hold the conversation (its lock, and the store's lease when the store
grants leases), read its state, save the new one behind the fence, release.

Rows: in memory (no store: a single process, nothing shared, nothing kept across a
restart), SQLite (a file; leases for processes sharing it) and PostgreSQL (shared by
replicas behind a load balancer), each store also without its leases (the store hidden
behind a plain ``SessionStore``: read and save only, as before leases, unsafe for
replicas), ``--decisions`` decisions in a row on one conversation, no ``forward()`` work
(what the transform itself costs is ``fig_gateway_latency``).

    python -m benchmarks.gateway_sessions --dsn postgresql://... [--decisions 300]

Without ``--dsn`` the PostgreSQL rows are left out; with it, the tables are
``bench_sessions_*`` (reused by every run). Prints p50 and p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from contextfold.gateway import SessionState, SessionStates
from contextfold.workspace import PostgresWorkspace, SQLiteWorkspace


class _NoLeases:
    """A store's state methods only: ``SessionStates`` takes no lease on it."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def initialize(self) -> None:
        await self.store.initialize()

    async def close(self) -> None:
        await self.store.close()

    async def save_state(self, session_id: str, state_json: str) -> None:
        await self.store.save_state(session_id, state_json)

    async def load_state(self, session_id: str) -> str | None:
        text: str | None = await self.store.load_state(session_id)
        return text


async def _measure(store: Any, decisions: int) -> tuple[float, float]:
    if store is not None:
        await store.initialize()
    states = SessionStates(store)
    key = uuid.uuid4().hex
    took: list[float] = []
    try:
        for i in range(decisions):
            start = time.perf_counter()
            async with states.hold(key) as held:
                await held.save(SessionState(seen=i))
            took.append(time.perf_counter() - start)
    finally:
        if store is not None:
            await store.close()
    took.sort()
    return statistics.median(took) * 1000, took[int(0.99 * (len(took) - 1))] * 1000


async def _main(dsn: str | None, decisions: int) -> None:
    where = Path(tempfile.mkdtemp())
    rows: list[tuple[str, Any]] = [
        ("memory", None),
        ("SQLite, no lease", _NoLeases(SQLiteWorkspace(where / "plain.sqlite"))),
        ("SQLite, leased", SQLiteWorkspace(where / "leased.sqlite")),
    ]
    if dsn:
        plain = PostgresWorkspace(dsn, table_prefix="bench_sessions_")
        rows.append(("PostgreSQL, no lease", _NoLeases(plain)))
        rows.append(("PostgreSQL, leased", PostgresWorkspace(dsn, table_prefix="bench_sessions_")))
    print("| state | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    for name, store in rows:
        p50, p99 = await _measure(store, decisions)
        print(f"| {name} | {p50:.3f} | {p99:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a PostgreSQL DSN (its tables get a fresh prefix)")
    parser.add_argument("--decisions", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(_main(args.dsn, args.decisions))


if __name__ == "__main__":
    main()
