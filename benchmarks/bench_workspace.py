"""Workspace benchmark: append throughput and bytes stored per offloaded message.

Messages come from ``data/trajectories/swebench-verified-gemini3pro/`` (each run's
``messages``, wrapped as ``Msg``). Every backend gets the same messages, offloaded one per
call to one session (the worst case: one append per message). PostgreSQL runs when
``CONTEXTFOLD_TEST_PG_DSN`` is set or local server binaries exist (a throwaway server).
S3 runs against the tests' S3-protocol server (moto on loopback, one request at a time)
when ``contextfold[s3]`` and moto are installed: its rate shows the client's cost per
request on this machine, not a real object store's latency.

    PYTHONPATH=src python benchmarks/bench_workspace.py [--messages 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
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


Make = Callable[[int], Awaitable[BaseWorkspace]]
"""A fresh store for repeat ``r``."""


async def measure(
    make: Make, r: int, msgs: list[Msg], size: Callable[[int], int]
) -> tuple[float, int]:
    """Appends per second, and bytes stored (``size``, else the logical size listed)."""
    ws = await make(r)
    try:
        start = time.perf_counter()
        for m in msgs:
            await ws.offload_context("bench", [m])
        elapsed = time.perf_counter() - start
        stored = size(r) or sum(i.size for i in await ws.list_items("bench"))
    finally:
        await ws.close()
    return len(msgs) / elapsed, stored


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def main(n: int, repeats: int) -> None:
    msgs = load_messages(n)
    backends: list[tuple[str, Make, Callable[[int], int]]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))

        def opened(build: Callable[[int], BaseWorkspace]) -> Make:
            async def make(r: int) -> BaseWorkspace:
                ws = build(r)
                await ws.initialize()
                return ws

            return make

        def db_size(fsync: bool) -> Callable[[int], int]:
            def size(r: int) -> int:
                path = tmp / f"ws-{fsync}-{r}.db"
                conn = sqlite3.connect(path)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.close()
                return path.stat().st_size

            return size

        backends.append(("Memory", opened(lambda r: MemoryWorkspace()), lambda r: 0))
        for fsync in (True, False):
            backends.append(
                (
                    f"Local (fsync={fsync})",
                    opened(lambda r, f=fsync: LocalWorkspace(tmp / f"local-{f}-{r}", fsync=f)),
                    lambda r, f=fsync: dir_size(tmp / f"local-{f}-{r}"),
                )
            )
            backends.append(
                (
                    f"SQLite (fsync={fsync})",
                    opened(lambda r, f=fsync: SQLiteWorkspace(tmp / f"ws-{f}-{r}.db", fsync=f)),
                    db_size(fsync),
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
        tag = f"{os.getpid()}"
        if dsn is not None:
            backends.append(
                (
                    "PostgreSQL (logical bytes)",
                    opened(lambda r: PostgresWorkspace(dsn, table_prefix=f"bench{tag}_{r}_")),
                    lambda r: 0,
                )
            )
        endpoint = _s3_endpoint(stack)
        if endpoint is not None:
            from tests.s3_server import create_bucket

            from contextfold.workspace import S3Workspace

            await create_bucket(endpoint, "bench")

            def s3(prefix: str) -> S3Workspace:
                return S3Workspace("bench", prefix=prefix, endpoint_url=endpoint)

            backends.append(
                ("S3 (moto on loopback)", opened(lambda r: s3(f"alone{tag}-{r}/")), lambda r: 0)
            )
            if dsn is not None:
                for threshold, label in ((64 * 1024, "64 KiB"), (1024, "1 KiB")):
                    backends.append(
                        (
                            f"PostgreSQL + S3 (bodies >= {label} in S3)",
                            opened(
                                lambda r, t=threshold: PostgresWorkspace(
                                    dsn,
                                    table_prefix=f"benchs3{tag}_{t}_{r}_",
                                    blobs=s3(f"blobs{tag}/"),
                                    blob_threshold=t,
                                )
                            ),
                            lambda r: 0,
                        )
                    )
        rates: dict[str, list[float]] = {name: [] for name, _, _ in backends}
        stored: dict[str, int] = {}
        for r in range(repeats):  # interleaved: each repeat runs every backend once
            for name, make, size in backends:
                rate, stored[name] = await measure(make, r, msgs, size)
                rates[name].append(rate)
    payload = sum(len(m.model_dump_json()) + 1 for m in msgs)
    print(
        f"{len(msgs)} messages, {sum(len(m.model_dump_json()) for m in msgs) / len(msgs):.0f} "
        f"bytes of JSON each on average; one offload call per message; median of {repeats} "
        "interleaved repeats\n"
    )
    print("| backend | appends/s | bytes stored / message | stored / JSON |")
    print("|---|---:|---:|---:|")
    for name, _, _ in backends:
        rate, size = statistics.median(rates[name]), stored[name]
        print(f"| {name} | {rate:,.0f} | {size / len(msgs):,.0f} | {size / payload:.2f} |")


def _s3_endpoint(stack: ExitStack) -> str | None:
    sys.path.insert(0, str(ROOT))
    try:
        import aiobotocore  # noqa: F401
        import moto.server  # noqa: F401
        from tests.s3_server import CREDENTIALS, s3_server
    except ImportError as exc:
        print(f"(S3 skipped: {exc})", file=sys.stderr)
        return None
    for key, value in CREDENTIALS.items():
        os.environ.setdefault(key, value)
    return stack.enter_context(s3_server())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.repeats))
