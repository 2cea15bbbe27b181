"""One system in a process of its own: a synthetic session (timing and memory), or the
recorded runs replayed at some windows (timing).

Run as ``python -m benchmarks._child --system agentscope|contextfold --messages N`` or
``... --replay 16000,32000`` by the overhead and memory figures. Only the side being
measured is imported (not the benchmark harness, not the other system), so the resident
set is that system's own, and one system's imports and garbage never slow the other.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import resource
import threading
from typing import Any

from ._common import Pending, RunResult
from ._data import load_swebench, synthetic_session

__all__ = ["SYNTHETIC_CONTEXT", "reasoning_steps", "replay_child", "synthetic_child"]

SYNTHETIC_CONTEXT = 1_000_000  # large enough that no synthetic session compresses


def reasoning_steps(r: RunResult) -> list[float]:
    """Per-step overheads without the final text-only turn and the tail after it."""
    return r.step_overheads[:-2] if len(r.step_overheads) > 2 else r.step_overheads


class RssSampler:
    """Samples this process's resident set size every few milliseconds in a thread."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = self.current()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def current() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.current())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


async def synthetic_child(system: str, n_messages: int) -> dict[str, Any]:
    """Run one synthetic session on one system; timing and memory."""
    if system == "agentscope":
        from . import _agentscope as side
    else:
        from . import _contextfold as side  # type: ignore[no-redef]
    try:
        # Warm-up on a short session: imports, tokenizer loading and first-call costs are
        # paid here, by both systems alike, and not counted.
        await side.run_session(synthetic_session(40, seed=1), context_size=SYNTHETIC_CONTEXT)
        session = synthetic_session(n_messages)
        gc.collect()
        base = RssSampler.current()
        with RssSampler() as rss:
            r = await side.run_session(session, context_size=SYNTHETIC_CONTEXT)
    except Pending as exc:
        return {"pending": str(exc)}
    except Exception as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}
    steps = reasoning_steps(r)
    return {
        "steps": steps,
        "history": r.step_history[: len(steps)],
        "total": r.total_overhead,
        "model": r.model_time,
        "tool": r.tool_time,
        "wall": r.wall,
        "rss_before_kib": base // 1024,
        "rss_peak_kib": rss.peak // 1024,
        "compressions": len(r.compressions),
    }


async def replay_child(system: str, windows: list[int], limit: int | None) -> dict[str, Any]:
    """Replay the recorded SWE-bench runs on one system at each window, after a whole
    warm-up pass at the first (not counted): a single warm-up session left the first
    measured pass 20-35% slower than a second one. Per window and run: the reasoning steps'
    overheads, the run's total overhead and its compressions (or why it could not run)."""
    if system == "agentscope":
        from . import _agentscope as side
    else:
        from . import _contextfold as side  # type: ignore[no-redef]
    sessions = load_swebench(limit=limit)

    async def one_pass(window: int) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        for session in sessions:
            try:
                r = await side.run_session(session, context_size=window)
            except Pending as exc:
                runs.append({"note": f"pending: {exc}"})
                continue
            except Exception as exc:  # report, never invent
                runs.append({"note": f"failed: {type(exc).__name__}: {exc}"})
                continue
            runs.append(
                {
                    "steps": reasoning_steps(r),
                    "total": r.total_overhead,
                    "compressions": len(r.compressions),
                }
            )
        return runs

    await one_pass(windows[0])
    return {str(window): await one_pass(window) for window in windows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._child")
    parser.add_argument("--system", choices=["agentscope", "contextfold"], required=True)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--messages", type=int)
    what.add_argument("--replay", help="windows, comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="first N recorded runs")
    args = parser.parse_args()
    logging.getLogger("as").setLevel(logging.WARNING)
    logging.getLogger("contextfold").setLevel(logging.WARNING)
    if args.replay is not None:
        windows = [int(w) for w in args.replay.split(",")]
        print(json.dumps(asyncio.run(replay_child(args.system, windows, args.limit))))
    else:
        print(json.dumps(asyncio.run(synthetic_child(args.system, args.messages))))


if __name__ == "__main__":
    main()
