"""Ids that differ only in case never share a name, so they stay apart on case-insensitive
filesystems (macOS and Windows defaults), where ``Run-A`` and ``run-a`` are one directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace, decode_key, encode_key

_CASEY = st.text(st.sampled_from("aAbBzZ09_-.é%~/"), min_size=1, max_size=160)


@given(a=_CASEY, change=st.sampled_from([str.upper, str.lower, str.swapcase, str.title]))
def test_distinct_ids_never_encode_to_names_equal_but_for_case(
    a: str, change: Callable[[str], str]
) -> None:
    b = change(a)
    if a != b:
        assert encode_key(a).casefold() != encode_key(b).casefold()


@given(value=_CASEY)
def test_encoded_names_still_decode_to_the_id(value: str) -> None:
    key = encode_key(value)
    if "~" not in key:
        assert decode_key(key) == value


def test_lower_case_ids_keep_their_readable_names() -> None:
    assert encode_key("load-s001_x.y") == "load-s001_x.y"


async def test_sessions_differing_in_case_get_directories_distinct_without_case(
    tmp_path: Path,
) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    for sid in ("Run-A", "run-a", "RUN-A"):
        await ws.offload_context(sid, [Msg("user", f"from {sid}", "user")])
        await ws.offload_tool_result(sid, ToolResultBlock(id="Call_X", name="t", output=sid))
        await ws.offload_tool_result(sid, ToolResultBlock(id="call_x", name="t", output=sid))
    dirs = [p.name for p in (tmp_path / "ws" / "sessions").iterdir()]
    assert len({d.casefold() for d in dirs}) == 3
    sessions = tmp_path / "ws" / "sessions"
    files = [str(p.relative_to(sessions)) for p in sessions.glob("*/tool_result-*")]
    assert len({f.casefold() for f in files}) == len(files) == 6
    assert sorted(await ws.list_sessions()) == ["RUN-A", "Run-A", "run-a"]
    for sid in ("Run-A", "run-a", "RUN-A"):
        [msg] = await ws.load_context(sid)
        assert msg.text == f"from {sid}"
