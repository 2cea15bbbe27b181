"""The agent with a real workspace: truncation, read-back tools, skills and saved sessions."""

from pathlib import Path

from contextfold.agent import Agent
from contextfold.context import ContextConfig
from contextfold.message import Msg
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace

from .agent_support import assert_valid, make_agent


async def workspace(tmp_path: Path) -> LocalWorkspace:
    ws = LocalWorkspace(workdir=tmp_path / "ws")
    await ws.initialize()
    return ws


async def test_readback_tools_are_offered_with_a_workspace(tmp_path: Path) -> None:
    model = ScriptedModel(["ok"])
    await make_agent(model, offloader=await workspace(tmp_path)).reply("hi")
    assert model.requests[0].tool_names == ["Read", "Grep", "Glob", "Search"]


async def test_readback_tools_can_be_turned_off(tmp_path: Path) -> None:
    model = ScriptedModel(["ok"])
    ws = await workspace(tmp_path)
    await make_agent(model, offloader=ws, readback_tools=False).reply("hi")
    assert model.requests[0].tool_names == []


async def test_truncated_tool_result_can_be_read_back(tmp_path: Path) -> None:
    toolkit = Toolkit()
    big = "\n".join(f"line {i}: value-{i}" for i in range(400))
    toolkit.register(lambda: big, name="dump")
    model = ScriptedModel(
        [
            tool_reply(("dump", {})),
            tool_reply(("Grep", {"pattern": "value-377"})),
            "Found it.",
        ]
    )
    agent = Agent(
        name="my_agent",
        system_prompt="...",
        model=model,
        toolkit=toolkit,
        context_config=ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, tool_result_limit=300),
        offloader=await workspace(tmp_path),
    )
    reply = await agent.reply(Msg("user", "Dump it and find 377.", "user"))
    assert reply.text == "Found it."
    stored = model.requests[1].messages[-1].tool_results[0].text()
    assert "<<<TRUNCATED>>>" in stored
    assert "value-377" not in stored
    grep = model.requests[2].messages[-1].tool_results[0]
    assert not grep.is_error
    assert "line 377: value-377" in grep.text()
    assert_valid(model)


async def test_workspace_skills_dir_is_used(tmp_path: Path) -> None:
    ws = await workspace(tmp_path)
    folder = ws.skills_dir / "sql"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: sql\ndescription: Query databases.\n---\n")
    model = ScriptedModel(["ok"])
    await make_agent(model, offloader=ws).reply("hi")
    assert "- sql: Query databases." in model.requests[0].messages[0].text


async def test_session_saved_to_workspace_resumes_in_a_new_agent(tmp_path: Path) -> None:
    ws = await workspace(tmp_path)
    first = make_agent(ScriptedModel(["noted: blue"]), offloader=ws, session_id="s-42")
    await first.reply("My favourite colour is blue.")
    await first.save_session()

    model = ScriptedModel(["blue"])
    second = make_agent(model, offloader=await workspace(tmp_path))
    assert await second.resume_session("s-42")
    await second.reply("What is my favourite colour?")
    assert [m.text for m in model.requests[0].messages[1:]] == [
        "My favourite colour is blue.",
        "noted: blue",
        "What is my favourite colour?",
    ]
    assert second.session_id == "s-42"
    assert not await second.resume_session("unknown")
