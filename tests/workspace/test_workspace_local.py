"""LocalWorkspace against the workspace contract, plus its filesystem specifics."""

# These tests inspect and damage the files directly, on purpose.
# ruff: noqa: ASYNC230, ASYNC240

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.testing import WorkspaceContract
from contextfold.workspace import BaseWorkspace, LocalWorkspace

from .builtin_contract import Backend, BuiltinWorkspaceTests


@pytest.fixture
def local_backend(tmp_path: Path) -> Backend:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET-4f1c\n")

    async def new() -> BaseWorkspace:
        ws = LocalWorkspace(root, fsync=False)
        await ws.initialize()
        return ws

    return Backend(
        new=new, spec={"kind": "local", "workdir": str(root)}, outside=outside, extra={"root": root}
    )


class TestLocalWorkspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self, local_backend: Backend) -> Backend:
        return local_backend


# -- filesystem specifics --------------------------------------------------------------------

import os  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from contextfold._exceptions import UnsafePathError  # noqa: E402
from contextfold.message import Msg, ToolResultBlock  # noqa: E402
from contextfold.tool import readback_tools  # noqa: E402

from .builtin_contract import SECRET, image, run, snapshot  # noqa: E402


async def test_layout_matches_the_spec(local_backend: Backend) -> None:
    ws = await local_backend.new()
    root: Path = local_backend.extra["root"]
    ctx = await ws.offload_context("s1", [Msg("user", [image()], "user")])
    tool = await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="x"))
    assert ctx == str(root / "sessions/s1/context.jsonl")
    assert tool == str(root / "sessions/s1/tool_result-c1.txt")
    assert [p.suffix for p in (root / "data").glob("*.png")] == [".png"]
    assert (root / "skills").is_dir()
    assert ws.skills_dir == root / "skills"


async def test_appends_never_rewrite_the_file(local_backend: Backend) -> None:
    ws = await local_backend.new()
    ref = await ws.offload_context("s1", [Msg("user", "first", "user")])
    inode = os.stat(ref).st_ino
    await ws.offload_context("s1", [Msg("user", "second", "user")])
    assert os.stat(ref).st_ino == inode
    assert len(Path(ref).read_bytes().splitlines()) == 2


async def test_torn_last_line_is_cut_before_the_next_append(local_backend: Backend) -> None:
    ws = await local_backend.new()
    ref = await ws.offload_context("s1", [Msg("user", "kept", "user")])
    with open(ref, "ab") as f:
        f.write(b'{"name": "cut by a cra')  # a crashed writer's partial line
    assert [m.text for m in await ws.load_context("s1")] == ["kept"]
    await ws.offload_context("s1", [Msg("user", "next", "user")])
    lines = Path(ref).read_bytes().splitlines()
    assert [Msg.model_validate_json(x).text for x in lines] == ["kept", "next"]


async def test_damaged_data_copy_is_rewritten_not_trusted(local_backend: Backend) -> None:
    ws = await local_backend.new()
    ref = await ws.offload_data("s1", image())
    Path(ref).write_bytes(b"\x89PNG half")  # what a rename-less writer could leave behind
    await ws.offload_data("s2", image())
    assert await ws.read_bytes(ref) == Path(ref).read_bytes()
    assert len(Path(ref).read_bytes()) > len(b"\x89PNG half")


async def test_symlinked_session_dir_is_refused(local_backend: Backend) -> None:
    ws = await local_backend.new()
    root: Path = local_backend.extra["root"]
    outside = local_backend.outside
    assert outside is not None
    (root / "sessions" / "evil").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with pytest.raises(UnsafePathError, match="symlink"):
        await ws.offload_context("evil", [Msg("user", "x", "user")])
    with pytest.raises(UnsafePathError):
        await ws.read("sessions/evil/secret.txt")
    with pytest.raises(UnsafePathError):
        await ws.purge("evil")
    assert snapshot(outside) == before


async def test_symlinked_item_is_not_read_listed_or_grepped(local_backend: Backend) -> None:
    ws = await local_backend.new()
    root: Path = local_backend.extra["root"]
    assert local_backend.outside is not None
    await ws.offload_context("s1", [Msg("user", "x", "user")])
    link = root / "sessions/s1/tool_result-leak.txt"
    link.symlink_to(local_backend.outside / "secret.txt")
    with pytest.raises(UnsafePathError):
        await ws.read(str(link))
    assert all(i.path != "sessions/s1/tool_result-leak.txt" for i in await ws.list_items())
    read, grep, glob, *_ = readback_tools(ws)
    assert SECRET not in await read(str(link))
    assert SECRET not in await grep("TOPSECRET")
    assert "leak" not in await glob()


async def test_symlinked_context_log_is_not_appended_through(local_backend: Backend) -> None:
    ws = await local_backend.new()
    root: Path = local_backend.extra["root"]
    assert local_backend.outside is not None
    target = local_backend.outside / "secret.txt"
    (root / "sessions/s2").mkdir()
    (root / "sessions/s2/context.jsonl").symlink_to(target)
    with pytest.raises(UnsafePathError):
        await ws.offload_context("s2", [Msg("user", "x", "user")])
    assert target.read_text() == f"{SECRET}\n"


async def test_fifo_in_place_of_a_log_is_refused_without_hanging(local_backend: Backend) -> None:
    ws = await local_backend.new()
    root: Path = local_backend.extra["root"]
    (root / "sessions/s3").mkdir()
    os.mkfifo(root / "sessions/s3/context.jsonl")
    with pytest.raises(UnsafePathError):
        await ws.offload_context("s3", [Msg("user", "x", "user")])
    with pytest.raises(UnsafePathError):
        await ws.read("sessions/s3/context.jsonl")


async def test_absolute_path_outside_workdir_is_unsafe(local_backend: Backend) -> None:
    ws = await local_backend.new()
    assert local_backend.outside is not None
    with pytest.raises(UnsafePathError, match="outside the workspace"):
        await ws.read(str(local_backend.outside / "secret.txt"))


_PLANT_AT = ["sessions/{s}", "sessions/{s}/context.jsonl", "sessions/{s}/tool_result-t.txt", "data"]


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    where=st.sampled_from(_PLANT_AT),
    session_id=st.sampled_from(["s", "../s", "a/b", "é"]),
    to_dir=st.booleans(),
)
def test_planted_symlinks_never_let_writes_out(
    local_backend: Backend, where: str, session_id: str, to_dir: bool
) -> None:
    from contextfold.workspace import encode_key

    root: Path = local_backend.extra["root"]
    outside = local_backend.outside
    assert outside is not None

    async def go() -> None:
        ws = await local_backend.new()
        link = root / where.format(s=encode_key(session_id))
        link.parent.mkdir(parents=True, exist_ok=True)
        aside = link.with_name(link.name + ".aside")
        if link.is_dir() and not link.is_symlink():
            link.rename(aside)  # e.g. the real data/ directory
        elif link.is_symlink() or link.exists():
            return
        link.symlink_to(outside if to_dir else outside / "secret.txt")
        before = snapshot(outside)
        try:
            await ws.offload_context(session_id, [Msg("user", [image()], "user")])
            await ws.offload_tool_result(session_id, ToolResultBlock(id="t", name="t", output="o"))
        except UnsafePathError:
            pass
        finally:
            link.unlink()
            if aside.exists():
                aside.rename(link)
        assert snapshot(outside) == before

    run(go())
