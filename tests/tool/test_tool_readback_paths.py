"""Every path ``Grep`` and ``Glob`` print is one ``Read`` accepts as printed (issue 26).

They show the canonical workspace-relative reference (``sessions/<session>/...``), never
an absolute host path: the model copies what it sees, and a host path tells it nothing
(and tells it where the workspace lives).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextfold.message import Base64Source, DataBlock, Msg, TextBlock, ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import BaseWorkspace, LocalWorkspace, MemoryWorkspace

SESSIONS = ["thread:t1 é", "T2/../x", "%41" + "z" * 130]
TOOL_IDS = ["call:1/x", "call:1/x", "toolu_01ABC", "a b%20c"]
PNG = Base64Source(media_type="image/png", data="iVBORw0KGgo=")


@pytest.fixture(params=["local", "memory"])
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseWorkspace]:
    ws: BaseWorkspace = (
        LocalWorkspace(tmp_path / "work dir:1", fsync=False)
        if request.param == "local"
        else MemoryWorkspace()
    )
    await ws.initialize()
    for sid in SESSIONS:
        for n, tid in enumerate(TOOL_IDS):
            output: str | list[TextBlock | DataBlock] = f"line one\nneedle {n} of {sid}\n"
            if n == 3:
                output = [TextBlock(text=output), DataBlock(source=PNG)]
            await ws.offload_tool_result(sid, ToolResultBlock(id=tid, name="t", output=output))
        await ws.offload_context(sid, [Msg(role="user", name="u", content=f"needle in {sid}")])
    yield ws
    await ws.close()


def _host(ws: BaseWorkspace) -> str | None:
    return str(ws.workdir) if isinstance(ws, LocalWorkspace) else None


_MATCH = re.compile(r"^(sessions/[^:]+\.(?:txt|jsonl)):(\d+):(.*)$")


@pytest.mark.parametrize("bound", [True, False])
async def test_glob_paths_are_relative_and_readable_as_printed(
    ws: BaseWorkspace, bound: bool
) -> None:
    for sid in SESSIONS:
        Read, _, Glob, *_ = readback_tools(ws, session_id=sid if bound else None)
        listing = await Glob()
        host = _host(ws)
        assert host is None or host not in listing
        paths = [row.split("\t")[0] for row in listing.splitlines()]
        everything = len(SESSIONS) * (len(TOOL_IDS) + 1) + 1  # one data file, shared
        assert len(paths) == (len(TOOL_IDS) + 2 if bound else everything)
        for path in paths:
            assert path.startswith(("sessions/", "data/")), path
            text = await Read(path)
            assert not text.startswith("Error"), (path, text)
            if path.startswith("sessions/"):
                assert "needle" in text


@pytest.mark.parametrize("bound", [True, False])
async def test_grep_paths_are_relative_and_readable_as_printed(
    ws: BaseWorkspace, bound: bool
) -> None:
    for sid in SESSIONS:
        Read, Grep, *_ = readback_tools(ws, session_id=sid if bound else None)
        found = await Grep("needle", context=1, max_results=1000)
        host = _host(ws)
        assert host is None or host not in found
        rows = [_MATCH.match(row) for row in found.splitlines() if ":" in row]
        matches = [m for m in rows if m is not None]
        assert len(matches) == (len(TOOL_IDS) + 1) * (1 if bound else len(SESSIONS))
        for m in matches:
            path, line, text = m.group(1), int(m.group(2)), m.group(3)
            shown = await Read(path, offset=line - 1, limit=1)
            assert shown.split("\n")[0] == f"{line:>6}\t{text}", (path, shown)
            assert (await Grep("needle", path=path)).startswith(path)


async def test_search_hits_name_the_relative_reference(ws: BaseWorkspace) -> None:
    Read, *_, Search = readback_tools(ws, session_id=SESSIONS[0])
    hits = await Search("needle")
    host = _host(ws)
    assert host is None or host not in hits
    calls = re.findall(r"Read\(path='([^']+)'", hits)
    assert calls
    for path in calls:
        assert not (await Read(path)).startswith("Error")
