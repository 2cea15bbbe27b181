"""A writer killed with SIGKILL at random points never loses an acknowledged line.

Each round forks a writer that appends messages of 10 B to 400 kB and reports ``ack <id>``
on a pipe after each append returned; the parent kills it at a random moment of its writing
(20 to 300 ms after it said it was connected). After 30 rounds (10 for the databases and
S3) on the same session, every acknowledged message is present and every complete line of
the log parses.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from contextfold.message import Msg
from contextfold.workspace import BaseWorkspace

from . import _ws_proc as workspace_proc
from .builtin_contract import run

ROUNDS = {"local": 30, "sqlite": 10, "postgres": 10, "s3": 10, "postgres+s3": 10}


@pytest.fixture(params=list(ROUNDS))
def crash_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[dict[str, Any], Callable[[], Awaitable[BaseWorkspace]]]:
    if request.param == "local":
        spec: dict[str, Any] = {"kind": "local", "workdir": str(tmp_path / "ws")}
    elif request.param == "sqlite":
        spec = {"kind": "sqlite", "path": str(tmp_path / "ws.db")}
    else:
        s3: dict[str, Any] = {}
        if "s3" in request.param:
            s3 = {
                "kind": "s3",
                "bucket": request.getfixturevalue("s3_bucket"),
                "prefix": request.getfixturevalue("s3_prefix"),
                "endpoint": request.getfixturevalue("s3_endpoint"),
            }
        if request.param == "s3":
            spec = s3
        else:
            dsn = request.getfixturevalue("pg_dsn")
            spec = {"kind": "postgres", "dsn": dsn, "prefix": request.getfixturevalue("pg_prefix")}
            if s3:
                spec["s3"] = {**s3, "blob_threshold": 20_000}

    async def new() -> BaseWorkspace:
        ws = workspace_proc.build(spec)
        await ws.initialize()
        return ws

    return spec, new


def _kill_round(spec: dict[str, Any], writer: int, rng: random.Random) -> set[str]:
    rfd, wfd = os.pipe()
    proc = workspace_proc.start(spec, "crash", writer, 0, wfd)
    os.close(wfd)
    ready = os.read(rfd, 6)  # blocks until the writer has connected (slow on a busy machine)
    assert ready == b"ready\n", f"the writer died before it was ready ({proc.exitcode})"
    os.set_blocking(rfd, False)
    deadline = time.monotonic() + rng.uniform(0.02, 0.3)
    chunks: list[bytes] = []
    while time.monotonic() < deadline:
        try:
            chunks.append(os.read(rfd, 65536))
        except BlockingIOError:
            time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    os.set_blocking(rfd, True)
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    acked = b"".join(chunks).decode().split("\n")[:-1]  # a cut last ack is not an ack
    return {a.removeprefix("ack ") for a in acked}


def test_sigkilled_writers_lose_no_acknowledged_line(
    crash_backend: tuple[dict[str, Any], Callable[[], Awaitable[BaseWorkspace]]],
) -> None:
    spec, new = crash_backend

    async def warm_up() -> None:  # forked writers inherit what the first client loaded
        await (await new()).close()

    run(warm_up())
    rng = random.Random(5)
    acked: set[str] = set()
    rounds = ROUNDS[spec["kind"] + ("+s3" if "s3" in spec and spec["kind"] == "postgres" else "")]
    for writer in range(rounds):
        acked |= _kill_round(spec, writer, rng)

    async def stored() -> tuple[list[str], bytes]:
        ws = await new()
        try:
            raw = await ws.read_bytes("sessions/crash/context.jsonl")
            await ws.offload_context("crash", [Msg("user", "after", "user")])
            return [m.text for m in await ws.load_context("crash")], raw
        finally:
            await ws.close()

    texts, raw = run(stored())
    assert acked, "the writers never got an append acknowledged"
    ids = {t.split(" ", 1)[0] for t in texts}
    assert acked <= ids
    for line in raw.splitlines():
        Msg.model_validate_json(line)  # every line the reader returns parses
    if spec["kind"] == "local":  # the torn tail, if any, was cut before the next append
        whole = (Path(spec["workdir"]) / "sessions/crash/context.jsonl").read_bytes()
        assert whole.endswith(b"\n")
        for line in whole.splitlines():
            Msg.model_validate_json(line)
