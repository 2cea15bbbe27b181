"""The agent works with an offloader it has never seen: the spec's ``S3Offloader`` shape.

Structural protocols only: nothing below inherits from contextfold. The offloader's own
behaviour is the contract's (``test_workspace_custom.py``); here the agent must call it
when it truncates or compresses, and show the model exactly the reference it returned.
"""

from __future__ import annotations

from contextfold.context import ContextConfig, truncation_marker
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit
from tests.agent.agent_support import assert_valid, make_agent

from .test_workspace_custom import DictWorkspace, S3Offloader

BIG = "\n".join(f"line {i}: value-{i}" for i in range(400))
SUMMARY = {
    "task_overview": "Collect the facts.",
    "current_state": "Six facts noted.",
    "important_discoveries": "none",
    "next_steps": "continue",
    "context_to_preserve": "",
}


def dump_toolkit() -> Toolkit:
    toolkit = Toolkit()
    toolkit.register(lambda: BIG, name="dump")
    return toolkit


async def test_truncated_tool_result_goes_to_the_offloader_and_its_reference_to_the_marker() -> (
    None
):
    s3 = S3Offloader()
    model = ScriptedModel([tool_reply(("dump", {})), "done"])
    config = ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, tool_result_limit=300)
    agent = make_agent(model, dump_toolkit(), context_config=config, offloader=s3)
    await agent.reply("Dump it.")
    [(key, stored)] = s3.objects.items()
    assert stored == BIG  # the whole output, not just the part cut
    seen = model.requests[1].messages[-1].tool_results[0].text()
    assert seen.endswith(truncation_marker(f"s3://agents/{key}"))
    assert_valid(model)


async def test_compressed_messages_go_to_the_offloader_and_the_summary_cites_them() -> None:
    s3 = S3Offloader()
    model = ScriptedModel([f"noted {i}" for i in range(6)] + [SUMMARY])
    agent = make_agent(model, offloader=s3, session_id="s-1")
    for i in range(6):
        await agent.reply(f"Fact {i}: the code word is ZETA-{i}.")
    assert await agent.compress_context(force=True) is not None
    [(key, stored)] = s3.objects.items()
    assert key.startswith("sessions/s-1/")
    assert "ZETA-0" in stored
    assert agent.engine.summary is not None
    assert f"s3://agents/{key}" in agent.engine.summary.text


async def test_readback_tools_come_only_with_a_reader() -> None:
    plain, reading = ScriptedModel(["ok"]), ScriptedModel(["ok"])
    await make_agent(plain, offloader=S3Offloader()).reply("hi")
    await make_agent(reading, offloader=DictWorkspace()).reply("hi")
    assert plain.requests[0].tool_names == []
    assert reading.requests[0].tool_names == ["Read", "Grep", "Glob"]


async def test_truncated_result_reads_back_through_a_custom_reader() -> None:
    model = ScriptedModel(
        [tool_reply(("dump", {})), tool_reply(("Grep", {"pattern": "value-377"})), "found"]
    )
    config = ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, tool_result_limit=300)
    agent = make_agent(model, dump_toolkit(), context_config=config, offloader=DictWorkspace())
    await agent.reply("Dump it and find 377.")
    grep = model.requests[2].messages[-1].tool_results[0]
    assert not grep.is_error
    assert "line 377: value-377" in grep.text()


async def test_session_saved_to_a_custom_store_resumes_in_a_new_agent() -> None:
    s3 = S3Offloader()
    first = make_agent(ScriptedModel(["noted: blue"]), offloader=s3, session_id="s-42")
    await first.reply("My favourite colour is blue.")
    await first.save_session()
    model = ScriptedModel(["blue"])
    second = make_agent(model, offloader=s3)
    assert await second.resume_session("s-42")
    await second.reply("What is my favourite colour?")
    assert model.requests[0].messages[1].text == "My favourite colour is blue."
