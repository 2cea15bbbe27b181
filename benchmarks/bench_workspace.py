"""Workspace benchmark: append throughput and bytes stored per offloaded message.

Messages come from ``data/trajectories/swebench-verified-gemini3pro/`` (each run's
``messages``, wrapped as ``Msg``). Every backend gets the same messages, offloaded one per
call to one session (the worst case: one append per message). PostgreSQL runs when
``CONTEXTFOLD_TEST_PG_DSN`` is set or local server binaries exist (a throwaway server).

    PYTHONPATH=src python benchmarks/bench_workspace.py [--messages 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

from contextfold.message import Msg
from contextfold.workspace import (
    BaseWorkspace,
    LocalWorkspace,
    MemoryWorkspace,
    PostgresWorkspace,
    SQLiteWorkspace,
)

ROOT = Path(__file__).resolve().parents[1]
TRAJ = ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"


def load_messages(limit: int) -> list[Msg]:
    msgs: list[Msg] = []
    for path in sorted(TRAJ.glob("*.traj.json")):
        for m in json.loads(path.read_text())["messages"]:
            role = m["role"] if m["role"] in ("user", "assistant", "system") else "user"
            msgs.append(Msg(role, str(m["content"]), role))
            if len(msgs) >= limit:
                return msgs
    return msgs


async def measure(
    name: str,
    make: Callable[[], Awaitable[BaseWorkspace]],
    msgs: list[Msg],
    size: Callable[[], int],
) -> tuple[str, float, float, float]:
    ws = await make()
    try:
        start = time.perf_counter()
        for m in msgs:
            await ws.offload_context("bench", [m])
        elapsed = time.perf_counter() - start
        stored = size() or sum(i.size for i in await ws.list_items("bench"))
    finally:
        await ws.close()
    payload = sum(len(m.model_dump_json()) + 1 for m in msgs)
    return name, len(msgs) / elapsed, stored / len(msgs), stored / payload


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def main(n: int) -> None:
    msgs = load_messages(n)
    rows: list[tuple[str, float, float, float]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))

        async def local(fsync: bool) -> BaseWorkspace:
            ws = LocalWorkspace(tmp / f"local-{fsync}", fsync=fsync)
            await ws.initialize()
            return ws

        async def sqlite(fsync: bool) -> BaseWorkspace:
            ws = SQLiteWorkspace(tmp / f"ws-{fsync}.db", fsync=fsync)
            await ws.initialize()
            return ws

        def db_size(fsync: bool) -> Callable[[], int]:
            def size() -> int:
                path = tmp / f"ws-{fsync}.db"
                conn = sqlite3.connect(path)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.close()
                return path.stat().st_size

            return size

        async def memory() -> BaseWorkspace:
            ws = MemoryWorkspace()
            await ws.initialize()
            return ws

        rows.append(await measure("Memory", memory, msgs, lambda: 0))
        for fsync in (True, False):
            rows.append(
                await measure(
                    f"Local (fsync={fsync})",
                    lambda f=fsync: local(f),
                    msgs,
                    lambda f=fsync: dir_size(tmp / f"local-{f}"),
                )
            )
            rows.append(
                await measure(
                    f"SQLite (fsync={fsync})", lambda f=fsync: sqlite(f), msgs, db_size(fsync)
                )
            )
        dsn = os.environ.get("CONTEXTFOLD_TEST_PG_DSN")
        if dsn is None:
            sys.path.insert(0, str(ROOT))
            from tests.pg_server import throwaway_postgres  # the tests' throwaway server

            try:
                dsn = stack.enter_context(throwaway_postgres())
            except Exception as exc:  # no server binaries: say so, keep the other rows
                print(f"(PostgreSQL skipped: {exc})", file=sys.stderr)
        if dsn is not None:

            async def pg() -> BaseWorkspace:
                ws = PostgresWorkspace(dsn, table_prefix=f"bench{os.getpid()}_")
                await ws.initialize()
                return ws

            rows.append(await measure("PostgreSQL (logical bytes)", pg, msgs, lambda: 0))
    print(
        f"{len(msgs)} messages, {sum(len(m.model_dump_json()) for m in msgs) / len(msgs):.0f} "
        "bytes of JSON each on average; one offload call per message\n"
    )
    print("| backend | appends/s | bytes stored / message | stored / JSON |")
    print("|---|---:|---:|---:|")
    for name, rate, per_msg, ratio in rows:
        print(f"| {name} | {rate:,.0f} | {per_msg:,.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    asyncio.run(main(parser.parse_args().messages))
