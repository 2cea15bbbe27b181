"""Results of the agent's read-back tools are cut without a second offload."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contextfold.context import READBACK_HINT, TRUNCATION_MARKER, ContextConfig
from contextfold.message import Msg, ToolResultBlock
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace

from .agent_support import assert_valid, make_agent

BIG = "\n".join(f"line {i}: value-{i} status ok" for i in range(400))
CONFIG = ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, tool_result_limit=300)
MARKER_REF = re.compile(r"refer to the file in '([^']+)'")
TOOL_WORDS = re.compile(r"\b(Read|Grep|Glob|Search)\b|refer to the file|read (it|them) from")


async def workspace(tmp_path: Path) -> LocalWorkspace:
    ws = LocalWorkspace(workdir=tmp_path / "ws")
    await ws.initialize()
    return ws


def dump_toolkit(name: str = "dump") -> Toolkit:
    toolkit = Toolkit()
    toolkit.register(lambda: BIG, name=name)
    return toolkit


def last_result(request: ScriptedRequest) -> ToolResultBlock | None:
    msg: Msg = request.messages[-1]
    return msg.tool_results[0] if msg.tool_results else None


class Reader:
    """Dump, then read the offloaded copy back with ``then`` (Read or Grep), then stop."""

    def __init__(self, then: str, args: dict[str, object]) -> None:
        self.then, self.args = then, args
        self.results: dict[str, ToolResultBlock] = {}

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        last = last_result(request)
        if last is None:
            return tool_reply(("dump", {}))
        self.results[last.name] = last
        if last.name == "dump":
            found = MARKER_REF.search(last.text())
            assert found is not None, last.text()
            return tool_reply((self.then, {"path": found.group(1), **self.args}))
        return "done"


async def test_readback_result_over_limit_is_cut_without_a_new_offload(tmp_path: Path) -> None:
    ws = await workspace(tmp_path)
    script = Reader("Grep", {"pattern": "value"})
    model = ScriptedModel(script)
    agent = make_agent(model, dump_toolkit(), context_config=CONFIG, offloader=ws)
    await agent.reply("Dump, then grep.")
    items = await ws.list_items(agent.session_id)
    grep = script.results["Grep"]
    assert grep.text().endswith(f"\n{READBACK_HINT}\n{TRUNCATION_MARKER}")
    assert len(items) == 1  # only the dump's offload, not a copy of the Grep result
    assert_valid(model)


async def test_read_with_a_large_limit_returns_a_continuation_within_the_limit(
    tmp_path: Path,
) -> None:
    ws = await workspace(tmp_path)
    script = Reader("Read", {"limit": 400})
    model = ScriptedModel(script)
    agent = make_agent(model, dump_toolkit(), context_config=CONFIG, offloader=ws)
    await agent.reply("Dump, then read it all.")
    read = script.results["Read"].text()
    assert "<<<TRUNCATED>>>" not in read
    assert re.search(r"call Read with offset=\d+ to continue\)$", read)
    assert model.token_counter.count_text(read) <= CONFIG.tool_result_limit


async def test_user_tool_named_read_is_still_offloaded(tmp_path: Path) -> None:
    ws = await workspace(tmp_path)
    model = ScriptedModel([tool_reply(("Read", {})), "done"])
    agent = make_agent(
        model, dump_toolkit("Read"), context_config=CONFIG, offloader=ws, readback_tools=False
    )
    await agent.reply("Read it.")
    (item,) = await ws.list_items(agent.session_id)
    stored = agent.context[-2].tool_results[0].text()
    assert "line 399: value-399" in (await ws.read_bytes(item.ref)).decode()
    # No read-back tools: the marker says the rest was omitted, naming no file or tool.
    assert "has been omitted" in stored
    assert item.ref not in stored
    assert READBACK_HINT not in stored


@pytest.mark.parametrize("readback", [True, False])
async def test_without_readback_tools_no_note_sends_the_model_to_them(
    tmp_path: Path, readback: bool
) -> None:
    # Agent(readback_tools=False) gives the model no Read/Grep/Glob/Search: the truncation
    # marker it sees must not tell it to use them (issue 26, point 6).
    ws = await workspace(tmp_path)
    model = ScriptedModel([tool_reply(("dump", {})), "done"])
    agent = make_agent(
        model, dump_toolkit(), context_config=CONFIG, offloader=ws, readback_tools=readback
    )
    await agent.reply("Dump it.")
    result = last_result(model.requests[-1])
    assert result is not None
    tools = set(model.requests[-1].tool_names)
    named = {m.group(0) for m in TOOL_WORDS.finditer(result.text())}
    if readback:
        assert "Read" in tools
        assert named, result.text()
    else:
        assert not tools & {"Read", "Grep", "Glob", "Search"}
        assert not named, result.text()
