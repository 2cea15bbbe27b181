"""MemoryWorkspace against the workspace contract."""

from __future__ import annotations

import pytest

from contextfold.testing import WorkspaceContract
from contextfold.workspace import BaseWorkspace, MemoryWorkspace

from .builtin_contract import Backend, BuiltinWorkspaceTests


class TestMemoryWorkspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self) -> Backend:
        ws = MemoryWorkspace()

        async def new() -> BaseWorkspace:
            await ws.initialize()
            return ws  # one store: every "instance" is the same object

        return Backend(new=new)
