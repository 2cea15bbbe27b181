"""One system on one synthetic session, in a process of its own: timing and memory.

Run as ``python -m benchmarks._child --system agentscope|contextfold --messages N`` by the
overhead and memory figures. Only the side being measured is imported (not the benchmark
harness, not the other system), so the resident set is that system's own.
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
from ._data import synthetic_session

__all__ = ["SYNTHETIC_CONTEXT", "reasoning_steps", "synthetic_child"]

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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._child")
    parser.add_argument("--system", choices=["agentscope", "contextfold"], required=True)
    parser.add_argument("--messages", type=int, required=True)
    args = parser.parse_args()
    logging.getLogger("as").setLevel(logging.WARNING)
    logging.getLogger("contextfold").setLevel(logging.WARNING)
    print(json.dumps(asyncio.run(synthetic_child(args.system, args.messages))))


if __name__ == "__main__":
    main()
