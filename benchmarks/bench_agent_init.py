"""Making an ``Agent``: what a server pays when it builds one per request or per resumed
session (``Agent.from_state``).

Run: ``python benchmarks/bench_agent_init.py`` (``PYTHONPATH=<tree>/src`` picks the tree,
for an A/B of two commits run alternately in one session). The agent has the default
tools (read-back and tasks) over a ``MemoryWorkspace`` and a scripted model; the first
construction (imports, first tool models) is reported apart from the median of the next
200.
"""

from __future__ import annotations

import statistics
import time


def main() -> None:
    started = time.perf_counter()
    from contextfold.agent import Agent
    from contextfold.testing import ScriptedModel
    from contextfold.workspace import MemoryWorkspace

    def make() -> Agent:
        return Agent(
            name="a", system_prompt="Help.", model=ScriptedModel([]), offloader=MemoryWorkspace()
        )

    make()
    first = time.perf_counter() - started
    times = []
    for _ in range(200):
        t = time.perf_counter()
        make()
        times.append(time.perf_counter() - t)
    print(
        f"Agent(...) with the default tools: first (with imports) {first * 1e3:.0f} ms, "
        f"then median {statistics.median(times) * 1e3:.3f} ms",
        flush=True,
    )


if __name__ == "__main__":
    main()
