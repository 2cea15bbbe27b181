"""Local and Memory, the two backends the large-item tests run on, made one way.

``test_workspace_large_items.py`` and ``test_workspace_in_process.py`` each built them
with the same fixture, four times over; they share it here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from contextfold.workspace import BaseWorkspace, LocalWorkspace, MemoryWorkspace

KINDS = ["local", "memory"]


def make(
    kind: str,
    tmp_path: Path,
    local: type[LocalWorkspace] = LocalWorkspace,
    memory: type[MemoryWorkspace] = MemoryWorkspace,
) -> Any:
    """A new (not yet initialized) workspace of ``kind``, of the classes given."""
    return local(tmp_path / "w", fsync=False) if kind == "local" else memory()


def workspace_fixture(
    name: str, fill: Callable[[BaseWorkspace], Awaitable[None]] | None = None
) -> Any:
    """A fixture ``name`` giving each of :data:`KINDS`, initialized and filled by ``fill``."""

    async def opened(
        request: pytest.FixtureRequest, tmp_path: Path
    ) -> AsyncIterator[BaseWorkspace]:
        ws: BaseWorkspace = make(request.param, tmp_path)
        await ws.initialize()
        if fill is not None:
            await fill(ws)
        yield ws
        await ws.close()

    return pytest.fixture(opened, params=KINDS, name=name)
