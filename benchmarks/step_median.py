"""Our median per-step overhead on the 44 recorded runs, alone (no AgentScope), for A/B runs.

Figure 1's absolute times move with the machine's speed from run to run; a change is
measured by running this in two trees (``git worktree``) alternately, in one session:

    for i in 1 2 3 4 5 6; do
        (cd ../before && python -m benchmarks.step_median 16000,32000)
        (cd ../after && python -m benchmarks.step_median 16000,32000)
    done

and comparing the medians of the rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

from ._child import reasoning_steps
from ._contextfold import run_session
from ._data import load_swebench


async def _median_ms(size: int) -> float:
    steps: list[float] = []
    for session in load_swebench():
        steps.extend(reasoning_steps(await run_session(session, context_size=size)))
    return statistics.median(steps) * 1000


async def main(sizes: list[int]) -> None:
    # Warm-up, a whole pass: after a single session the first measured pass still ran
    # 20-35% slower than a second one.
    await _median_ms(sizes[0])
    for size in sizes:
        print(f"{size}: median per step {await _median_ms(size):.4f} ms", flush=True)


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "16000,32000"
    asyncio.run(main([int(x) for x in arg.split(",")]))
