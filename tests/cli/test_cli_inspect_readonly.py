"""``contextfold inspect`` only looks (issue 28): it writes nothing in the workspace it
inspects and never lets stored text drive the terminal."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from contextfold._exceptions import WorkspaceError
from contextfold.cli._inspect import inspect_workspace
from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace

runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # write 'echo pwned' to the clipboard
CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;root@prod\x07"
BIDI = "\u202eexe.txt"
C1 = "\x9b31m"
PAYLOAD = f"before {OSC52}{CLEAR}{TITLE} {BIDI} {C1} after\ttab"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command("inspect")(inspect_workspace)
    app.command("other")(lambda: None)  # two commands: `inspect` is named on the command line
    return app


def _build(root: Path) -> Path:
    """A workspace as an agent leaves it, then pared down to what inspect must not add:
    no ``data/``, ``skills/`` or index, and a torn last line in the context log."""

    async def fill() -> None:
        ws = LocalWorkspace(root, fsync=False)
        await ws.initialize()
        await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output=PAYLOAD))
        await ws.offload_context("s1", [Msg("tool", PAYLOAD, "user")])
        await ws.close()

    asyncio.run(fill())
    for name in ("search.sqlite3", "search.sqlite3-wal", "search.sqlite3-shm"):
        (root / name).unlink(missing_ok=True)
    (root / "data").rmdir()
    (root / "skills").rmdir()
    with (root / "sessions" / "s1" / "context.jsonl").open("ab") as f:
        f.write(b'{"torn')
    return root


def _tree(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``root``: mode, size, mtime and content digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


COMMANDS = [
    [],
    ["s1"],
    ["s1", "--item", "tool_result-c1.txt"],
    ["s1", "--item", "context.jsonl"],
    ["s1", "--item", "context.jsonl", "--raw"],
    ["s1", "--item", "tool_result-c1.txt", "--raw"],
]


def test_inspect_creates_changes_and_repairs_nothing(cli: typer.Typer, tmp_path: Path) -> None:
    root = _build(tmp_path / "w")
    before = _tree(root)
    for args in COMMANDS:
        result = runner.invoke(cli, ["inspect", str(root), *args], color=True)
        assert result.exit_code == 0, (args, result.output)
    assert _tree(root) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_inspect_works_on_a_read_only_tree(cli: typer.Typer, tmp_path: Path) -> None:
    root = _build(tmp_path / "w")
    paths = [Path(d) for d, _, _ in os.walk(root)]
    for path in paths:
        path.chmod(0o555)
    try:
        for args in COMMANDS:
            result = runner.invoke(cli, ["inspect", str(root), *args], color=True)
            assert result.exit_code == 0, (args, result.output)
            assert "Traceback" not in result.output
    finally:
        for path in paths:
            path.chmod(0o700)


@pytest.mark.parametrize("args", COMMANDS[2:4], ids=["tool_result", "context"])
def test_escape_sequences_are_shown_not_sent(
    cli: typer.Typer, tmp_path: Path, args: list[str]
) -> None:
    root = _build(tmp_path / "w")
    result = runner.invoke(cli, ["inspect", str(root), *args], color=True)
    assert result.exit_code == 0, result.output
    assert not any(c in result.stdout for c in CONTROLS), repr(result.stdout)
    shown = " ".join(result.stdout.split())
    for visible in (
        r"\x1b]52;c;ZWNobyBwd25lZA==\x07",
        r"\x1b[2J\x1b[H",
        r"\x1b]0;root@prod\x07",
        r"\u202eexe.txt",
        r"\x9b31m",
    ):
        assert visible in shown


def test_raw_prints_the_stored_text_as_is(cli: typer.Typer, tmp_path: Path) -> None:
    root = _build(tmp_path / "w")
    result = runner.invoke(
        cli, ["inspect", str(root), "s1", "--item", "tool_result-c1.txt", "--raw"], color=True
    )
    assert result.exit_code == 0, result.output
    assert PAYLOAD in result.stdout


def test_a_hostile_session_id_is_escaped_in_the_listing(cli: typer.Typer, tmp_path: Path) -> None:
    async def fill() -> None:
        async with LocalWorkspace(tmp_path / "w", fsync=False) as ws:
            await ws.offload_tool_result(TITLE, ToolResultBlock(id="c", name="t", output="x"))

    asyncio.run(fill())
    result = runner.invoke(cli, ["inspect", str(tmp_path / "w")], color=True)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    assert r"\x1b]0;root@prod\x07" in result.stdout


async def test_a_read_only_workspace_writes_nothing_and_searches_what_exists(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    async with LocalWorkspace(root, fsync=False) as ws:
        await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="port 8443"))
    before = _tree(root)
    ro = LocalWorkspace(root, read_only=True)
    await ro.initialize()
    assert [h.path for h in await ro.search("8443")] == ["sessions/s1/tool_result-c1.txt"]
    assert await ro.read("sessions/s1/tool_result-c1.txt") == "port 8443"
    for write in (
        ro.offload_tool_result("s1", ToolResultBlock(id="c2", name="t", output="x")),
        ro.offload_context("s1", [Msg("user", "x", "user")]),
        ro.save_state("s1", "{}"),
        ro.purge("s1"),
    ):
        with pytest.raises(WorkspaceError, match="read-only"):
            await write
    await ro.close()
    assert _tree(root) == before
    (root / "search.sqlite3").unlink()
    ro = LocalWorkspace(root, read_only=True)
    await ro.initialize()
    with pytest.raises(WorkspaceError, match="search is unavailable"):
        await ro.search("8443")
    await ro.close()
    assert not (root / "search.sqlite3").exists()
    with pytest.raises(WorkspaceError, match="no such workspace"):
        await LocalWorkspace(tmp_path / "missing", read_only=True).initialize()
    assert not (tmp_path / "missing").exists()
    assert stat.S_ISDIR(root.stat().st_mode)
