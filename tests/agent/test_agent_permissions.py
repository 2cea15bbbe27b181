from pathlib import Path
from typing import Any

import pytest

from contextfold.agent import Permissions
from contextfold.context import ContextConfig
from contextfold.message import ToolCallBlock
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace

from .agent_support import assert_valid, make_agent


def toolkit_with(ran: list[str], *names: str) -> Toolkit:
    toolkit = Toolkit()
    for name in names:

        def run(name: str = name) -> str:
            ran.append(name)
            return f"{name} ran"

        toolkit.register(run, name=name)
    return toolkit


async def test_denied_tool_gets_error_result_and_does_not_run() -> None:
    ran: list[str] = []
    model = ScriptedModel([tool_reply(("rm_file", {})), "ok"])
    agent = make_agent(model, toolkit_with(ran, "rm_file"), permissions=Permissions(deny=["rm_*"]))
    await agent.reply("delete it")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "Permission denied" in result.text()
    assert ran == []
    assert_valid(model)


@pytest.mark.parametrize(("approve", "expected_runs"), [(True, ["write"]), (False, [])])
async def test_ask_rule_calls_the_user_callback(approve: bool, expected_runs: list[str]) -> None:
    ran: list[str] = []
    asked: list[ToolCallBlock] = []

    async def confirm(call: ToolCallBlock) -> bool:
        asked.append(call)
        return approve

    model = ScriptedModel([tool_reply(("write", {})), "ok"])
    permissions = Permissions(ask=["write"], ask_callback=confirm)
    await make_agent(model, toolkit_with(ran, "write"), permissions=permissions).reply("go")
    assert [c.name for c in asked] == ["write"]
    assert ran == expected_runs
    assert model.requests[1].messages[-1].tool_results[0].is_error is (not approve)


async def test_ask_without_callback_is_denied() -> None:
    ran: list[str] = []
    model = ScriptedModel([tool_reply(("write", {})), "ok"])
    agent = make_agent(model, toolkit_with(ran, "write"), permissions=Permissions(ask=["*"]))
    await agent.reply("go")
    assert ran == []
    assert "needs the user's approval" in model.requests[1].messages[-1].tool_results[0].text()


def test_strictest_matching_rule_wins() -> None:
    permissions = Permissions(allow=["*"], ask=["write_*"], deny=["write_secrets"])
    assert permissions.decide("read") == "allow"
    assert permissions.decide("write_file") == "ask"
    assert permissions.decide("write_secrets") == "deny"
    assert Permissions(default="deny").decide("anything") == "deny"


async def test_readback_tools_run_under_deny_all(tmp_path: Path) -> None:
    workspace = LocalWorkspace(workdir=tmp_path)
    await workspace.initialize()
    model = ScriptedModel([tool_reply(("Glob", {})), "ok"])
    agent = make_agent(model, offloader=workspace, permissions=Permissions(deny=["*"]))
    await agent.reply("list")
    result = model.requests[1].messages[-1].tool_results[0]
    assert not result.is_error
    assert "Permission denied" not in result.text()


async def test_user_tool_named_like_a_builtin_is_still_checked() -> None:
    ran: list[str] = []
    model = ScriptedModel([tool_reply(("Read", {})), "ok"])
    agent = make_agent(model, toolkit_with(ran, "Read"), permissions=Permissions(deny=["*"]))
    await agent.reply("read")
    assert ran == []
    assert model.requests[1].messages[-1].tool_results[0].is_error


async def test_compress_context_tool_runs_under_deny_all() -> None:
    model = ScriptedModel([tool_reply(("CompressContext", {})), "ok"])
    agent = make_agent(
        model,
        permissions=Permissions(default="deny"),
        context_config=ContextConfig(compression_tool_enabled=True),
    )
    await agent.reply("tidy up")
    result = model.requests[1].messages[-1].tool_results[0]
    assert not result.is_error
    assert "Nothing was compressed" in result.text()


async def test_ask_callback_error_counts_as_no() -> None:
    ran: list[str] = []

    def broken(call: Any) -> bool:
        raise RuntimeError("ui closed")

    model = ScriptedModel([tool_reply(("write", {})), "ok"])
    permissions = Permissions(ask=["write"], ask_callback=broken)
    await make_agent(model, toolkit_with(ran, "write"), permissions=permissions).reply("go")
    assert ran == []
