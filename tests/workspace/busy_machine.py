"""Processes that keep every core busy, for tests of what a loaded machine does to us."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def busy_processes(count: int = 4, settle: float = 0.5) -> AsyncIterator[None]:
    """``count`` processes spinning in Python for the block (killed after it)."""
    busy = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
        for _ in range(count)
    ]
    try:
        await asyncio.sleep(settle)
        yield
    finally:
        for p in busy:
            p.kill()
            await p.wait()
