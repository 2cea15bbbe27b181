"""Five ``Grep('needle')`` over a 100 MB Local item: matching threads lowered or not.

docs/RELIABILITY.md: a pattern's matching thread is set to nice 19 once it has run
``_grep.PATTERN_GRACE_S`` (a hostile pattern burns only what the loop leaves; until round
10, from its first instant); on a loaded machine a nice-19 thread descheduled while it
holds the GIL makes the loop wait behind every other process. This compares the loop gaps
of the same greps with the niceness as shipped and with it left at 0
(``_match_threads._lowest`` replaced). A large item is matched in a worker process since
round 3, its bytes moved by a thread at the caller's priority, so the two now differ little:

    PYTHONPATH=src python benchmarks/grep_niceness.py 19
    PYTHONPATH=src python benchmarks/grep_niceness.py 0
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import contextfold.workspace._match_threads as match_threads
from contextfold.message import ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import LocalWorkspace

sys.path.insert(0, str(Path(__file__).parent))
from hostile_large_items import big_text, held


async def main(nice: str) -> None:
    if nice == "0":
        match_threads._lowest = lambda thread_id: None
    with tempfile.TemporaryDirectory() as tmp:
        ws = LocalWorkspace(Path(tmp) / "w", fsync=False)
        await ws.initialize()
        block = ToolResultBlock(id="big", name="t", output=big_text(100))
        await ws.offload_tool_result("s1", block)
        _, Grep, *_ = readback_tools(ws, session_id="s1", grep_timeout=60)
        gaps = []
        for _ in range(5):
            _, gap, _wall = await held(Grep("needle"))
            gaps.append(gap)
        print(
            f"nice {nice}: Grep gaps median {statistics.median(gaps):.1f} max {max(gaps):.1f} ms"
            f"  {[round(x, 1) for x in gaps]} load {os.getloadavg()[0]:.1f}"
        )
        await ws.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "19"))
