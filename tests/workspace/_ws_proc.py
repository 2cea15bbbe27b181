"""Worker processes for the multi-process and crash tests.

Started with ``fork`` (no re-import, so 16 workers start in milliseconds); each builds its
own workspace over the shared store from a JSON-able spec.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
from typing import Any

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import (
    BaseWorkspace,
    LocalWorkspace,
    PostgresWorkspace,
    S3Workspace,
    SQLiteWorkspace,
)


def build(spec: dict[str, Any]) -> BaseWorkspace:
    if spec["kind"] == "local":
        return LocalWorkspace(spec["workdir"], fsync=spec.get("fsync", False))
    if spec["kind"] == "sqlite":
        return SQLiteWorkspace(spec["path"], fsync=spec.get("fsync", False))
    if spec["kind"] == "postgres":
        return PostgresWorkspace(
            spec["dsn"], table_prefix=spec["prefix"], max_connections=2, **_blob_args(spec)
        )
    if spec["kind"] == "s3":
        return s3(spec)
    raise ValueError(f"unknown backend {spec['kind']}")


def s3(spec: dict[str, Any]) -> S3Workspace:
    return S3Workspace(spec["bucket"], prefix=spec["prefix"], endpoint_url=spec["endpoint"])


def _blob_args(spec: dict[str, Any]) -> dict[str, Any]:
    """``blobs=`` and ``blob_threshold=`` for a PostgreSQL spec with an ``s3`` part."""
    if "s3" not in spec:
        return {}
    return {"blobs": s3(spec["s3"]), "blob_threshold": spec["s3"].get("blob_threshold", 1)}


async def _work(spec: dict[str, Any], mode: str, writer: int, n: int, out_fd: int) -> None:
    ws = build(spec)
    await ws.initialize()
    try:
        if mode == "append":
            for i in range(n):
                text = f"w{writer}-{i} " + "x" * random.randint(0, 5000)
                await ws.offload_context("shared", [Msg("user", text, "user")])
        elif mode == "tools":
            for i in range(n):
                block = ToolResultBlock(id="call/../x", name="bash", output=f"w{writer}-{i}")
                ref = await ws.offload_tool_result("shared", block)
                os.write(out_fd, f"{ref}\n".encode())
        elif mode == "crash":
            os.write(out_fd, b"ready\n")  # the parent's kill clock starts here
            i = 0
            while True:
                size = random.choice([10, 1000, 50_000, 400_000])
                msg = Msg("user", f"w{writer}-{i} " + "y" * size, "user")
                await ws.offload_context("crash", [msg])
                os.write(out_fd, f"ack w{writer}-{i}\n".encode())  # only after it returned
                i += 1
    finally:
        await ws.close()


def _entry(spec: dict[str, Any], mode: str, writer: int, n: int, out_fd: int) -> None:
    asyncio.run(_work(spec, mode, writer, n, out_fd))


def start(spec: dict[str, Any], mode: str, writer: int, n: int, out_fd: int) -> Any:
    """Fork a worker; returns the started ``multiprocessing.Process``."""
    proc = multiprocessing.get_context("fork").Process(
        target=_entry, args=(spec, mode, writer, n, out_fd), daemon=True
    )
    proc.start()
    return proc
