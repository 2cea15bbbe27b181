"""Defects that dropped facts after compaction, each pinned by the scenario that showed it.

Written against the agent's public API only, so each test also runs on the code before
the fix (where it fails).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import Agent, CompressionError, ContextConfig
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def _fields(words_per_field: int) -> dict[str, str]:
    names = (
        "task_overview",
        "current_state",
        "important_discoveries",
        "next_steps",
        "context_to_preserve",
    )
    return {name: _words(words_per_field, f"{name[:4]}w") for name in names}


def _bash_toolkit(output: Any) -> Toolkit:
    toolkit = Toolkit()

    def bash(command: str) -> str:
        """Run a shell command.

        Args:
            command: The command line.
        """
        return str(output(command))

    toolkit.register(bash)
    return toolkit


def _closing(template: str) -> str:
    """What the summary template prints after its last placeholder (its closing tag)."""
    return template.rsplit("}", 1)[1]


@pytest.mark.parametrize(("window", "words"), [(2560, 150), (16_000, 1000)])
async def test_the_cap_keeps_the_offload_reference_ledger_and_closing_tag(
    tmp_path: Path, window: int, words: int
) -> None:
    # The summarizer writes long fields; the cap must cut those, not what the engine adds.
    calls = [tool_reply(("bash", {"command": f"cat src/pkg/module_{i}.py"})) for i in range(40)]

    def respond(request: ScriptedRequest) -> ScriptedReply:
        if request.is_summary:
            return _fields(words)
        return calls.pop(0) if calls else "done"

    workspace = LocalWorkspace(workdir=tmp_path / "ws")
    await workspace.initialize()
    per_result = window // 12
    agent = Agent(
        name="a",
        system_prompt="You are a coding agent.",
        model=ScriptedModel(respond, context_size=window),
        toolkit=_bash_toolkit(lambda command: _words(per_result, "line")),
        offloader=workspace,
        tasks_enabled=False,
        max_iters=50,
    )
    await agent.reply("Read every module.")
    summary = agent.summary
    assert summary is not None
    text = summary.text
    refs = re.findall(r"saved in '([^']+)'", text)
    assert refs, "the reference to the offloaded messages was cut"
    assert (await workspace.read(refs[-1])).strip()
    assert "module_" in text  # the ledger's file paths (none of the fields mention them)
    assert text.rstrip().endswith(_closing(agent.context_config.summary_template).strip())


async def test_a_fresh_large_tool_result_is_sent_before_any_summary_covers_it() -> None:
    log_head = "============ test session starts ============"
    log = (
        log_head
        + "\n"
        + "\n".join(f"tests/test_parser.py::test_case_{i} PASSED [{i % 100}%]" for i in range(900))
    )
    replies: list[ScriptedReply] = [
        *(tool_reply(("bash", {"command": f"cat notes_{i}.txt"})) for i in range(4)),
        tool_reply(("bash", {"command": "pytest tests/test_parser.py -v"})),
        "seen",
    ]

    def respond(request: ScriptedRequest) -> ScriptedReply:
        if request.is_summary:
            return _fields(20)
        return replies.pop(0)

    model = ScriptedModel(respond, context_size=16_000)

    def output(command: str) -> str:
        return log if command.startswith("pytest") else _words(600, "note")

    agent = Agent(
        name="a",
        system_prompt="You are a coding agent.",
        model=model,
        toolkit=_bash_toolkit(output),
        tasks_enabled=False,
    )
    assert agent.engine.counter.count_text(log) > 10_000
    await agent.reply("Why does the parser test fail?")
    after_log = [r for r in model.requests if not r.is_summary][-1]
    sent = "\n".join(m.text for m in after_log.messages) + "\n".join(
        r.text() for m in after_log.messages for r in m.tool_results
    )
    assert log_head in sent, "the model never saw the log it asked for"
    assert any(
        isinstance(b, ToolCallBlock) and b.input.get("command", "").startswith("pytest")
        for m in after_log.messages
        for b in m.blocks()
    ), "the call that produced the log is not in the request"
    assert agent.engine.counter.count_request(after_log.messages, after_log.tools) <= 16_000


async def test_summary_retries_are_told_what_was_wrong_and_counted() -> None:
    invalid = {"task_overview": 42}  # wrong type, fields missing
    summary_requests: list[ScriptedRequest] = []

    def respond(request: ScriptedRequest) -> ScriptedReply:
        summary_requests.append(request)
        return invalid

    agent = Agent(
        name="a",
        system_prompt="You are a coding agent.",
        model=ScriptedModel(respond),
        context_config=ContextConfig(compression_fallback_to_truncation=False),
        tasks_enabled=False,
    )
    for i in range(6):
        agent.engine.append(Msg("user", f"question {i}", "user"))
        agent.engine.append(Msg("assistant", f"answer {i}", "assistant"))
    with pytest.raises(CompressionError) as raised:
        await agent.compress_context(force=True)
    message = str(raised.value)
    assert len(summary_requests) == 3
    assert "after 3 attempts" in message
    assert "after 1 attempt" not in message
    first, second, third = (r.messages for r in summary_requests)
    assert first != second != third
    assert "42 is not of type 'string'" in "\n".join(m.text for m in second)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(min_value=1, max_value=600))
async def test_a_truncated_result_fits_every_limit_the_config_accepts(
    tmp_path: Path, limit: int
) -> None:
    try:
        config = ContextConfig(tool_result_limit=limit)
    except ValueError:
        return  # not a value the config accepts
    # A deep workdir makes the offload reference (an absolute path) long.
    workdir = tmp_path.joinpath(*(f"deeply-nested-directory-{i}" for i in range(6)))
    workspace = LocalWorkspace(workdir=workdir)
    await workspace.initialize()
    agent = Agent(
        name="a",
        system_prompt="s",
        model=ScriptedModel(),
        context_config=config,
        offloader=workspace,
        tasks_enabled=False,
        session_id="a-session-with-a-rather-long-identifier-0123456789",
    )
    call = ToolCallBlock(id="call-with-a-long-identifier-0123456789", name="bash", input={})
    agent.engine.append(Msg("a", [call], "assistant"))
    result = ToolResultBlock(id=call.id, name="bash", output=_words(limit * 3 + 50, "x"))
    stored = await agent.engine.add_tool_results(Msg("tool", [result], "user"))
    (cut,) = stored.tool_results
    assert agent.engine.counter.count_text(cut.text()) <= limit


async def test_without_an_offloader_compressed_messages_can_still_be_read_back() -> None:
    def respond(request: ScriptedRequest) -> ScriptedReply:
        if request.is_summary:
            return _fields(5)
        results = [r for m in request.messages for r in m.tool_results]
        if results:
            return results[-1].text()[:200]
        # The model reads the reference out of the summary it is sent and reads it back.
        summary = "\n".join(m.text for m in request.messages)
        refs = re.findall(r"(?:saved in|saved to) '([^']+)'", summary)
        return tool_reply(("Read", {"path": refs[-1]})) if refs else "no reference"

    agent = Agent(
        name="a",
        system_prompt="You are a coding agent.",
        model=ScriptedModel(respond),
        tasks_enabled=False,
    )
    for i in range(6):
        agent.engine.append(Msg("user", f"question {i}: the code word is ZEBRA{i}", "user"))
        agent.engine.append(Msg("assistant", f"answer {i}", "assistant"))
    event = await agent.compress_context(force=True)
    assert event is not None
    assert agent.summary is not None
    assert "discarded" not in agent.summary.text
    reply = await agent.reply("What was the first code word?")
    assert "ZEBRA0" in reply.text
