"""Hostile load on the event loop: a 100 MB tool result and a glob over 114,000 sessions.

Issue 28, point 7: with a 100 MB tool result, ``Read(limit=1)`` and ``Grep`` held the event
loop 0.2 to 0.95 s per call (the whole item decoded and split on the loop),
``offload_tool_result`` 0.13 to 0.7 s and ``MemoryWorkspace.offload_context`` 1.5 s; an
unscoped ``Glob("**")`` over 114,000 sessions held it 483 ms and answered megabytes.

Each call below runs while a ticker task sleeps 5 ms at a time; the figure is the largest
lateness of a tick (how long the loop was held), target under 50 ms. Also shown: the
answer's size, the growth of the process's peak RSS during the call, and the longest
pause of the cyclic garbage collector during the call (in any thread: it holds the GIL).

The offloads run twice: straight into the workspace, and through the engine's offload
step (``SessionOffload``: the redaction hook, the content key, the offload) with
``ContextConfig(redact=redact_credentials)``, as an engine with a redactor offloads a
result it truncates or messages it compacts (``--no-redact`` leaves these out).

    PYTHONPATH=src python benchmarks/hostile_large_items.py [--mb 100] [--sessions 114000]
        [--backends local,memory] [--repeat 5] [--no-redact] [--busy N] [--only TEXT]
        [--stacks MS]

With ``--repeat N`` each call runs N times in a row and the table shows the median and the
largest of its N gaps (the machine's own lateness, shown by the idle row, adds to both).
To compare two trees on one machine, run the script twice with ``PYTHONPATH`` at each
tree's ``src`` (the script uses public names only, and ``SessionOffload``).

``--stacks MS`` re-arms ``faulthandler``'s watchdog at every tick, so whenever the loop is
``MS`` late every thread's stack is written to ``hostile_stacks.txt`` (the watchdog is a C
thread: it needs no GIL): what the loop waited on. That is how the Local offload's stall
under ``--busy 3`` was found (the loop freeing the 100 MB line; see ``_pieces``).

``--busy N`` starts N processes that spin in Python beside the run (at the same priority),
so a loaded machine can be had on demand (the gaps come from the OS descheduling a thread
that holds the GIL, which needs more runnable threads than cores); ``--only TEXT`` runs
only the calls whose name holds ``TEXT`` (the set-up calls still run, unmeasured).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import itertools
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

from contextfold.context import ContextConfig, redact_credentials
from contextfold.context._offload import SessionOffload
from contextfold.message import Msg, ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import BaseWorkspace, LocalWorkspace, MemoryWorkspace, Offloader

TARGET_MS = 50.0
TICK = 0.005


class _Pauses:
    """The cyclic collector's pauses (s), from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._start = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._start)

    def longest_since(self, n: int) -> float:
        return max(self.pauses[n:], default=0.0)


PAUSES = _Pauses()


CPU_OFF_LOOP: list[float] = []
"""Per call: CPU seconds this process spent in threads other than the loop's (work that
may hold the GIL; a worker process's CPU is not counted)."""


async def held(work: Awaitable[object]) -> tuple[object, float, float]:
    """``work``'s result, the largest tick lateness (ms) and its wall time (s); the CPU
    this process spent off the loop is appended to ``CPU_OFF_LOOP``."""
    late: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - start - TICK)

    async def watched() -> None:  # --stacks: what held the loop, when it was late
        assert STACKS is not None
        while not done.is_set():
            faulthandler.dump_traceback_later(STACKS[0], file=STACKS[1])
            await asyncio.sleep(TICK)
        faulthandler.cancel_dump_traceback_later()

    tick = asyncio.create_task(ticker())
    watch = asyncio.create_task(watched()) if STACKS is not None else None
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    cpu0, loop0 = time.process_time(), time.thread_time()
    try:
        result = await work
    finally:
        wall = time.perf_counter() - t0
        CPU_OFF_LOOP.append((time.process_time() - cpu0) - (time.thread_time() - loop0))
        done.set()
        await tick
        if watch is not None:
            await watch
    return result, max(late, default=0.0) * 1000, wall


def _python_only(seconds: float) -> int:
    """Arithmetic in bytecode for ``seconds``: the GIL is held and handed back every
    switch interval, never for one long call."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        for i in range(1000):
            n += i
    return n


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def big_text(mb: int) -> str:
    """``mb`` MB of log lines, one ``needle`` on the very last line."""
    line = "2026-12-04T05:00:00Z INFO worker-7 request served in 12 ms, status 200, bytes 4096\n"
    lines = (mb << 20) // len(line)
    return line * lines + "ERROR needle: the one line that matters\n"


async def make(backend: str, root: Path) -> BaseWorkspace:
    ws: BaseWorkspace = (
        LocalWorkspace(root / "w", fsync=False) if backend == "local" else MemoryWorkspace()
    )
    await ws.initialize()
    return ws


Step = tuple[str, Callable[[], Awaitable[object]]]
Row = tuple[str, str, list[float], list[float], float, float]
"""Call, answer size, the gaps (ms) and walls (s) of its repeats, the longest GC pause (ms),
the median CPU (s) this process spent off the loop."""


class _Engine:
    """What ``SessionOffload`` reads of its engine."""

    def __init__(self, offloader: Offloader, session_id: str, redact: bool) -> None:
        self.offloader: Offloader | None = offloader
        self.session_id = session_id
        self.config = ContextConfig(redact=redact_credentials if redact else None)


def engine_offload(ws: Offloader, session_id: str, *, redact: bool) -> SessionOffload:
    """A new engine's offload step (a new one each time: one remembers what it saved)."""
    return SessionOffload(_Engine(ws, session_id, redact))


ONLY: list[str] = []
STACKS: tuple[float, IO[str]] | None = None
"""``--stacks``: the lateness (s) that dumps every thread's stack, and the file."""


async def run_steps(backend: str, steps: list[Step], repeat: int) -> list[Row]:
    out: list[Row] = []
    for name, call in steps:
        if ONLY and not any(o in name for o in ONLY):
            if name.startswith("offload_tool_result"):
                await call()  # what the reads and greps read
            continue
        gaps: list[float] = []
        walls: list[float] = []
        size = "-"
        before = _rss_mb()
        first_pause = len(PAUSES.pauses)
        for _ in range(repeat):
            answer, gap, wall = await held(call())
            gaps.append(gap)
            walls.append(wall)
            size = f"{len(answer):,} chars" if isinstance(answer, str) else "-"
        pause = PAUSES.longest_since(first_pause) * 1000
        cpu = statistics.median(CPU_OFF_LOOP[-repeat:])
        out.append((name, size, gaps, walls, pause, cpu))
        print(
            f"  {backend:7} {name:52} held median {statistics.median(gaps):7.1f} ms, "
            f"max {max(gaps):7.1f} ms  wall {statistics.median(walls):6.2f} s  "
            f"answer {size:>14}  peak RSS +{_rss_mb() - before:.0f} MB  "
            f"longest GC pause {pause:.1f} ms  CPU off the loop {cpu:.2f} s",
            flush=True,
        )
    return out


async def large_item(
    backend: str, root: Path, mb: int, repeat: int, redacted: bool = True
) -> list[Row]:
    ws = await make(backend, root)
    text = big_text(mb)
    n_lines = text.count("\n")
    Read, Grep, Glob, *_ = readback_tools(ws, session_id="s1", grep_timeout=60)
    ref = "sessions/s1/tool_result-big.txt"
    runs = itertools.count()  # the first offload makes s1's item, repeats go elsewhere
    steps: list[Step] = [
        (
            f"offload_tool_result ({mb} MB)",
            lambda: ws.offload_tool_result(
                f"s1{next(runs) or ''}", ToolResultBlock(id="big", name="t", output=text)
            ),
        ),
        ("Read(limit=1)", lambda: Read(ref, limit=1)),
        ("Read(limit=1), again", lambda: Read(ref, limit=1)),
        (f"Read(offset={n_lines - 1}, limit=1)", lambda: Read(ref, offset=n_lines - 1, limit=1)),
        ("Grep('needle')", lambda: Grep("needle")),
        ("Glob('**')", lambda: Glob()),
        (
            f"offload_context (one {mb} MB message)",
            lambda: ws.offload_context("s2", [Msg("tool", text, "user")]),
        ),
    ]
    if redacted:
        rounds = itertools.count()
        block = ToolResultBlock(id="big", name="t", output=text)
        msgs = [Msg("tool", text, "user")]
        steps += [
            (
                f"engine offload, result ({mb} MB), redacted",
                lambda: engine_offload(ws, f"r{next(rounds)}", redact=True).result(block),
            ),
            (
                f"engine offload, context ({mb} MB), redacted",
                lambda: engine_offload(ws, "r", redact=True).context(msgs),
            ),
        ]
    out = await run_steps(backend, steps, repeat)
    await ws.close()
    return out


async def many_sessions(backend: str, root: Path, sessions: int, repeat: int) -> list[Row]:
    ws = await make(backend, root)
    t0 = time.perf_counter()
    batch = 500
    for start in range(0, sessions, batch):
        await asyncio.gather(
            *(
                ws.offload_tool_result(f"s{n:06d}", ToolResultBlock(id="c", name="t", output="x"))
                for n in range(start, min(start + batch, sessions))
            )
        )
    print(f"  {backend:7} ({sessions:,} sessions made in {time.perf_counter() - t0:.0f} s)")
    _, Grep, Glob, _ = readback_tools(ws, grep_timeout=60)
    steps: list[Step] = [
        (f"Glob('**') over {sessions:,} sessions", lambda: Glob()),
        ("Grep('x'), no session, stops at 100", lambda: Grep("x")),
        ("Glob('**'), again", lambda: Glob()),
        ("Glob('sessions/s000123/*')", lambda: Glob("sessions/s000123/*")),
    ]
    out = await run_steps(backend, steps, repeat)
    await ws.close()
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=114_000)
    parser.add_argument("--backends", default="local,memory")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-redact", action="store_true", help="leave out the engine offloads")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle row")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside the run")
    parser.add_argument("--only", action="append", default=[], help="calls whose name holds this")
    parser.add_argument(
        "--stacks", type=float, default=0, help="ms late: dump stacks to hostile_stacks.txt"
    )
    args = parser.parse_args()
    ONLY.extend(args.only)
    if args.stacks:
        global STACKS
        STACKS = (args.stacks / 1000, open("hostile_stacks.txt", "w"))  # noqa: SIM115, ASYNC230
    spinners = [_spin() for _ in range(args.busy)]
    try:
        return await _main(args)
    finally:
        for pid in spinners:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # noqa: ASYNC222 - killed: returns at once


def _spin() -> int:
    """A child process that runs Python bytecode until it is killed."""
    pid = os.fork()
    if pid == 0:
        n = 0
        while True:
            n = (n + 1) % 1000
    return pid


async def _main(args: argparse.Namespace) -> int:
    rows: list[tuple[str, Row]] = []
    # The machine's own lateness (other processes, the collector), with no call running.
    _, idle, wall = await held(asyncio.sleep(args.idle))
    name = f"nothing ({args.idle:g} s of ticks, the machine's own lateness)"
    idle_row = (name, "-", [idle], [wall], 0.0, 0.0)
    rows.append(("-", idle_row))
    print(f"  idle: held {idle:.1f} ms over {wall:.1f} s; load {os.getloadavg()}", flush=True)
    # The floor for any work off the loop in this process: a worker thread running only
    # short bytecodes (no long C call) shares the GIL with the loop; on a loaded machine
    # the OS may stop it while it holds the GIL, and the loop waits until it runs again.
    _, busy, wall = await held(asyncio.to_thread(_python_only, 3.0))
    busy_row = (
        "control: a thread running only Python bytecode, 3 s",
        "-",
        [busy],
        [wall],
        0.0,
        CPU_OFF_LOOP[-1],
    )
    rows.append(("-", busy_row))
    print(f"  control (a busy Python thread): held {busy:.1f} ms over {wall:.1f} s", flush=True)
    for backend in args.backends.split(","):
        if args.mb:
            with tempfile.TemporaryDirectory() as tmp:
                made = await large_item(
                    backend, Path(tmp), args.mb, args.repeat, not args.no_redact
                )
                for row in made:
                    rows.append((backend, row))
        if not args.sessions:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for row in await many_sessions(backend, Path(tmp), args.sessions, args.repeat):
                rows.append((backend, row))
    print(f"\nload average at the end: {os.getloadavg()}; --busy {args.busy}")
    print(
        f"\n| Workspace | call | loop gap, median of {args.repeat} | largest | "
        "longest GC pause | CPU off the loop | wall | answer |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    worst = worst_median = 0.0
    for backend, (name, size, gaps, walls, pause, cpu) in rows:
        med = statistics.median(gaps)
        if backend != "-":
            worst, worst_median = max(worst, max(gaps)), max(worst_median, med)
        print(
            f"| {backend} | `{name}` | {med:.1f} ms | {max(gaps):.1f} ms | {pause:.1f} ms | "
            f"{cpu:.2f} s | {statistics.median(walls):.2f} s | {size} |"
        )
    print(
        f"\nlargest median gap {worst_median:.1f} ms, largest single gap {worst:.1f} ms "
        f"(target < {TARGET_MS:.0f} ms)"
    )
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
