"""MemoryWorkspace against the workspace contract."""

from __future__ import annotations

import pytest

from contextfold.workspace import BaseWorkspace, MemoryWorkspace

from .contract import Backend, WorkspaceContract


class TestMemoryWorkspace(WorkspaceContract):
    @pytest.fixture
    def backend(self) -> Backend:
        ws = MemoryWorkspace()

        async def new() -> BaseWorkspace:
            await ws.initialize()
            return ws  # one store: every "instance" is the same object

        return Backend(new=new)
