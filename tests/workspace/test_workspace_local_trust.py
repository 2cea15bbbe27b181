"""LocalWorkspace does not trust the filesystem around it (issue 28, point 3).

The workspace root is resolved once and held: a workdir swapped for a symlink after
``initialize()`` does not receive the next offload. The parents it creates are private
whatever the umask, and a symlink planted where the search index goes is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold import UnsafePathError
from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace


@pytest.fixture
def umask000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_parents_it_creates_are_0700_under_umask_000(tmp_path: Path, umask000: None) -> None:
    root = tmp_path / "a" / "b" / "ws"
    async with LocalWorkspace(root, fsync=False) as ws:
        await ws.save_state("s1", "{}")
    assert {p.name: _mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", root)} == {
        "a": 0o700,
        "b": 0o700,
        "ws": 0o700,
    }


async def test_a_workdir_swapped_for_a_symlink_gets_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    evil = tmp_path / "evil"
    for sub in ("sessions", "data", "skills"):
        (evil / sub).mkdir(parents=True)
    async with LocalWorkspace(root, fsync=False) as ws:
        await ws.offload_context("s1", [Msg("user", "first", "user")])
        root.rename(tmp_path / "moved")
        root.symlink_to(evil)  # another local user swaps the workdir
        await ws.offload_context("s1", [Msg("user", "secret second", "user")])
        await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="key=1"))
        await ws.save_state("s1", '{"k": "secret"}')
        assert [m.text for m in await ws.load_context("s1")] == ["first", "secret second"]
    assert [p for p in evil.rglob("*") if p.is_file()] == []
    held = (tmp_path / "moved" / "sessions" / "s1" / "context.jsonl").read_text()
    assert "secret second" in held


async def test_a_symlink_planted_at_the_index_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir(mode=0o700)
    outside = tmp_path / "outside.sqlite3"
    (root / "search.sqlite3").symlink_to(outside)
    ws = LocalWorkspace(root, fsync=False)
    with pytest.raises(UnsafePathError, match=r"search\.sqlite3"):
        await ws.initialize()
    await ws.close()
    assert not outside.exists()


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
async def test_a_symlink_planted_at_the_index_journal_is_refused(
    tmp_path: Path, suffix: str
) -> None:
    root = tmp_path / "ws"
    root.mkdir(mode=0o700)
    outside = tmp_path / f"outside{suffix}"
    (root / f"search.sqlite3{suffix}").symlink_to(outside)
    ws = LocalWorkspace(root, fsync=False)
    with pytest.raises(UnsafePathError, match=r"search\.sqlite3"):
        await ws.initialize()
    await ws.close()
    assert not outside.exists()
