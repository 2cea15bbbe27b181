"""Resume on another worker: a session on PostgreSQL + S3 survives SIGKILL at any point.

Each round starts a worker process on a fresh session (records in PostgreSQL, bodies over
4 kB in S3 through ``PostgresWorkspace(blobs=S3Workspace(...))``), checks that a second
worker is refused while the first holds the lease, and SIGKILLs the first during a tool
call, during a compression or between steps (in turn, at the 1st to 3rd such moment, after
a random delay). A different process then resumes the session id (waiting for the dead
worker's lease to expire) and finishes the task. Checked after each round:

* the task is finished: every step ran and the answer is in the saved state;
* no tool call ran again after its result was stored (``exec k`` never follows
  ``stored k`` in the side-effect log);
* no acknowledged message is lost: every message of every state whose save returned is
  in the final history (the offloaded log plus the final context);
* every offloaded item is readable, with its listed size, and so is every reference the
  summary and the context hold; large items came back from S3.

Most of a round is the resuming worker waiting out the dead worker's lease, so the rounds
run ``LANES`` at a time, each on its own session; what a round does and checks is the same.

A last test pauses a worker (SIGSTOP) past its lease: another takes over, and the paused
one, continued, stops with ``LeaseLostError`` instead of running steps or overwriting.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from contextfold import SessionLeasedError
from contextfold.agent import AgentState
from contextfold.workspace import BlobStore, PostgresWorkspace

from ..workspace import _ws_proc
from . import rel_resume_child as child
from .rel_support import record, rng, scaled, summarize

pytestmark = pytest.mark.serial  # kill points and lease expiry in ms, measured alone

ROUNDS = 20
LANES = 4
POINTS = ("tool", "compression", "between")
_MARK = {"tool": "T", "compression": "C", "between": "S"}
_DELAY = {"tool": 0.05, "compression": 0.07, "between": 0.01}
_REF = re.compile(r"sessions/[A-Za-z0-9_%.\-~]+/(?:context\.jsonl|tool_result-[^\s\"'\])]+\.txt)")
BLOB_THRESHOLD = 4096
T = TypeVar("T")

_PARENT = threading.Lock()
"""Held by a lane while it forks a worker, reaps one or runs the parent's own asyncio work:
``fork`` copies only the calling thread, so no other lane may be inside a library then (a
lock it held would stay held in the child), and one thread at a time calls ``waitpid``
(two reaping the same child could lose its exit code)."""


def _start(spec: dict[str, Any], session_id: str, pipes: child.Pipes, *, wait: float) -> Any:
    with _PARENT:
        return child.start(spec, session_id, pipes, wait=wait)


def _exitcode(proc: Any) -> int | None:
    with _PARENT:
        code: int | None = proc.exitcode
        return code


def _join(proc: Any, timeout: float) -> int | None:
    """``proc``'s exit code once it exited, polled (None if still running at ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (code := _exitcode(proc)) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return code


def _run(coro: Coroutine[Any, Any, T]) -> T:
    with _PARENT:
        return asyncio.run(coro)


@pytest.fixture
def spec(
    pg_dsn: str, pg_prefix: str, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> dict[str, Any]:
    s3 = {"kind": "s3", "bucket": s3_bucket, "prefix": s3_prefix, "endpoint": s3_endpoint}
    return {
        "kind": "postgres",
        "dsn": pg_dsn,
        "prefix": pg_prefix,
        "s3": {**s3, "blob_threshold": BLOB_THRESHOLD},
    }


class Marks:
    """Reads the worker's progress marks from its pipe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.seen: Counter[str] = Counter()
        self._buf = b""

    def wait_for(self, mark: str, count: int, proc: Any, timeout: float = 60) -> bool:
        """Until ``mark`` was seen ``count`` times; False if the worker exited first."""
        deadline = time.monotonic() + timeout
        while self.seen[mark] < count:
            try:
                self._buf += os.read(self.read_fd, 4096)
            except BlockingIOError:
                if _exitcode(proc) is not None:
                    return False
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {mark!r} mark in {timeout} s") from None
                time.sleep(0.001)
                continue
            *lines, self._buf = self._buf.split(b"\n")
            self.seen.update(line.decode() for line in lines)
        return True

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


def _open(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


async def _rival_is_refused(spec: dict[str, Any], session_id: str) -> str:
    """A second worker trying the held session: the clear error it gets."""
    ws = _ws_proc.build(spec)
    await ws.initialize()
    agent = child.agent_for(ws, child.Pipes(marks=-1, side=-1, acks=-1))
    try:
        with pytest.raises(SessionLeasedError) as refused:
            async with agent.hold_session(session_id, lease_ttl=child.LEASE_TTL):
                pytest.fail("a second worker got a session that another worker runs")
        return str(refused.value)
    finally:
        await ws.close()


def _side_effects(path: Path) -> tuple[Counter[int], int]:
    """Executions per step, and how many ran before their result was stored; fails if one
    ran after its result was stored."""
    stored: set[int] = set()
    runs: Counter[int] = Counter()
    for line in path.read_text().splitlines():
        what, k = line.split()
        if what == "stored":
            stored.add(int(k))
        else:
            assert int(k) not in stored, f"step {k} ran again after its result was stored"
            runs[int(k)] += 1
    assert stored == set(range(1, child.STEPS + 1)), f"results stored: {sorted(stored)}"
    return runs, sum(runs.values()) - len(runs)


async def _check_store(spec: dict[str, Any], session_id: str, acked: set[str]) -> dict[str, int]:
    ws = _ws_proc.build(spec)
    await ws.initialize()
    assert isinstance(ws, PostgresWorkspace)
    try:
        raw = await ws.load_state(session_id)
        assert raw is not None
        state = AgentState.model_validate_json(raw)
        assert state.context[-1].text == f"task complete: all {child.STEPS} steps done"
        history = {m.id for m in await ws.load_context(session_id, with_data=False)}
        history |= {m.id for m in state.context}
        lost = acked - history
        assert not lost, f"{len(lost)} acknowledged messages are missing from the history"
        items = await ws.list_items(session_id)
        from_s3 = 0
        for item in items:
            body = await ws.read_bytes(item.ref)
            assert len(body) == item.size, f"{item.path}: {len(body)} bytes, listed {item.size}"
            if item.kind == "tool_result" and item.size >= BLOB_THRESHOLD:
                assert isinstance(ws.blobs, BlobStore)
                assert await ws.blobs.get_blob(_digest(body)) == body
                from_s3 += 1
        texts = [m.model_dump_json() for m in state.context]
        if state.summary is not None:
            texts.append(state.summary.model_dump_json())
        refs = {r for t in texts for r in _REF.findall(t)}
        for ref in refs:
            await ws.read(ref)
        return {"items": len(items), "refs": len(refs), "from_s3": from_s3}
    finally:
        await ws.close()


def _digest(body: bytes) -> str:
    import hashlib

    return hashlib.sha256(body).hexdigest()


def _acked(path: Path) -> set[str]:
    lines = path.read_text().split("\n")[:-1]  # a torn last line is not an ack
    return {i for line in lines for i in json.loads(line)["ids"]}


def test_sigkilled_worker_is_resumed_by_another_process(
    spec: dict[str, Any], tmp_path: Path
) -> None:
    random = rng(14)
    asyncio.run(_rival_is_refused_warm_up(spec))  # forked workers inherit loaded models
    rounds = scaled(ROUNDS)
    plan: list[tuple[str, int, float]] = []  # kill point, at its n-th mark, after a delay
    for n in range(rounds):
        point = POINTS[n % len(POINTS)]
        plan.append((point, random.randint(1, 3), random.uniform(0, _DELAY[point])))
    with ThreadPoolExecutor(LANES) as lanes:
        results = list(
            lanes.map(lambda n: _kill_and_resume(spec, tmp_path, n, *plan[n]), range(rounds))
        )
    kills = Counter(point for point, _, _ in plan)
    totals: Counter[str] = sum(results, Counter())
    assert totals["from_s3"] > 0, "no offloaded item went to S3"
    summarize(
        f"[resume postgres+s3] rounds={rounds} kills during tool={kills['tool']} "
        f"compression={kills['compression']} between steps={kills['between']} "
        f"acked messages={totals['acked']} items read={totals['items']} "
        f"(from S3: {totals['from_s3']}) references read={totals['refs']} "
        f"steps re-run before their result was stored={totals['reruns before store']}"
    )
    record("resume on another worker", "SIGKILL rounds [postgres+s3]", rounds)
    record("resume on another worker", "acknowledged messages checked", totals["acked"])


def _kill_and_resume(
    spec: dict[str, Any], tmp_path: Path, n: int, point: str, nth: int, delay: float
) -> Counter[str]:
    """One round on its own session: SIGKILL the first worker at the ``nth`` mark of
    ``point`` plus ``delay`` seconds, resume in a second process, check; what it counted."""
    session_id = f"resume-{n}"
    side, acks = tmp_path / f"side{n}", tmp_path / f"acks{n}"
    marks = Marks()
    go_read, go_write = os.pipe()
    pipes = child.Pipes(marks.write_fd, _open(side), _open(acks), go=go_read)
    first = _start(spec, session_id, pipes, wait=0)
    assert marks.wait_for("L", 1, first), "the first worker did not get the lease"
    message = _run(_rival_is_refused(spec, session_id))
    assert "is being run by another worker" in message
    os.write(go_write, b"g")
    os.close(go_read)
    os.close(go_write)
    pipes.go = -1
    reached = marks.wait_for(_MARK[point], nth, first)
    assert reached, f"the worker exited ({_exitcode(first)}) before its {point} kill point"
    time.sleep(delay)
    os.kill(first.pid, signal.SIGKILL)
    assert _join(first, 30) == -signal.SIGKILL

    second = _start(spec, session_id, pipes, wait=30)
    code = _join(second, 180)
    assert code == 0, f"the resuming worker failed (exit {code})"
    marks.close()
    for fd in (pipes.side, pipes.acks):
        os.close(fd)

    _, reruns = _side_effects(side)
    acked = _acked(acks)
    totals = Counter(_run(_check_store(spec, session_id, acked)))
    totals["acked"] += len(acked)
    totals["reruns before store"] += reruns
    return totals


async def _rival_is_refused_warm_up(spec: dict[str, Any]) -> None:
    ws = _ws_proc.build(spec)
    await ws.initialize()
    child.agent_for(ws, child.Pipes(-1, -1, -1)).model.token_counter.count_text("warm up")
    await ws.close()


def test_a_paused_worker_past_its_lease_stops_instead_of_overwriting(
    spec: dict[str, Any], tmp_path: Path
) -> None:
    asyncio.run(_rival_is_refused_warm_up(spec))
    side, acks = tmp_path / "side", tmp_path / "acks"
    marks = Marks()
    pipes = child.Pipes(marks=marks.write_fd, side=_open(side), acks=_open(acks))
    paused = child.start(spec, "paused", pipes, wait=0)
    assert marks.wait_for("S", 3, paused)
    assert marks.wait_for("T", marks.seen["T"] + 1, paused)  # stopped inside a tool call
    os.kill(paused.pid, signal.SIGSTOP)
    taker = child.start(spec, "paused", pipes, wait=30)
    taker.join(180)
    assert taker.exitcode == 0
    os.kill(paused.pid, signal.SIGCONT)
    paused.join(60)
    assert paused.exitcode == 3, "the paused worker went on after losing its lease"
    marks.close()
    for fd in (pipes.side, pipes.acks):
        os.close(fd)
    _side_effects(side)
    asyncio.run(_check_store(spec, "paused", _acked(acks)))


async def test_without_a_kill_every_step_runs_once(tmp_path: Path) -> None:
    # The task these workers run, uninterrupted: each step once. (With summary parts
    # appended even when the longer layer pushed the newest result out of the kept
    # messages unsummarized, the model saw no "step k done" and ran step k again.)
    from contextfold.message import Msg
    from contextfold.workspace import MemoryWorkspace

    read, write = os.pipe()
    os.set_blocking(read, False)
    side = tmp_path / "side"
    pipes = child.Pipes(marks=write, side=_open(side), acks=_open(tmp_path / "acks"))
    ws = MemoryWorkspace()
    await ws.initialize()
    try:
        reply = await child.agent_for(ws, pipes).reply(Msg("user", child.TASK, "user"))
    finally:
        for fd in (read, write, pipes.side, pipes.acks):
            os.close(fd)
    assert "all 12 steps done" in reply.text
    runs = [line for line in side.read_text().splitlines() if line.startswith("exec")]
    assert runs == [f"exec {k}" for k in range(1, child.STEPS + 1)]
