"""Offloaded content is private to its owner: files 0600, directories 0700, whatever the umask.

Tool output often holds tokens, keys and customer data; on a shared machine every other
user could read it if the workspace kept the usual 0644/0755 modes.
"""

# These tests inspect the files directly, on purpose.
# ruff: noqa: ASYNC240

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace, SQLiteWorkspace

from .builtin_contract import image


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
        for p in [root, *sorted(root.rglob("*"))]
    }


async def _filled(ws: LocalWorkspace | SQLiteWorkspace) -> None:
    """Initialize ``ws`` and store one of everything (a capped id too)."""
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", [image()], "user")])
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="token=x"))
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="again"))
    await ws.offload_data("s2", image(media_type="image/jpeg"))
    await ws.save_state("s1", "{}")
    await ws.offload_context("~" * 200, [Msg("user", "capped id", "user")])


async def test_local_workspace_files_are_0600_and_directories_0700(
    tmp_path: Path, umask: int
) -> None:
    root = tmp_path / "ws"
    ws = LocalWorkspace(root, fsync=False)
    await _filled(ws)
    await ws.purge("s2")  # takes the data directory's lock file too
    modes = _modes(root)
    assert len(modes) > 10
    wrong = {
        path: oct(mode)
        for path, mode in modes.items()
        if mode != (0o700 if (root / path).is_dir() else 0o600)
    }
    assert wrong == {}


async def test_local_workspace_leaves_an_existing_workdir_mode_alone(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    ws = LocalWorkspace(root, fsync=False)
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", "x", "user")])
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "sessions").stat().st_mode) == 0o700


async def test_sqlite_database_and_its_wal_and_shm_files_are_0600(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "ws.sqlite3"
    ws = SQLiteWorkspace(path, fsync=False)
    await _filled(ws)
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert {"ws.sqlite3", "ws.sqlite3-wal", "ws.sqlite3-shm"} <= set(files)
    assert {name: oct(mode) for name, mode in files.items() if mode != 0o600} == {}
    await ws.close()
