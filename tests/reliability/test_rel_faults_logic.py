"""Logic-level model faults (ScriptedModel) at every point of a reply.

Points: the reasoning call, the summary call of an automatic compression, the structured
output it must return, and a compression the agent asks for with the CompressContext tool.
Each fault must end in a retry, an error result the model reads, a fallback, or a clear
exception to the caller; afterwards the state is provider-valid, nothing already in the
history is lost (offloaded + context == everything added, in order, once) and the agent
keeps working.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from contextfold._exceptions import (
    CompressionError,
    ContextWindowExceededError,
    EmptyResponseError,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
)
from contextfold.agent import Agent, check_requests_valid
from contextfold.context import CompressionEvent, ContextConfig
from contextfold.message import ToolCallBlock
from contextfold.model import ChatResponse, ScriptedModel, tool_reply
from contextfold.workspace import MemoryWorkspace

from .rel_support import (
    Added,
    adder_toolkit,
    assert_nothing_lost,
    assert_provider_valid,
    filler,
    make_agent,
    offloaded,
    record,
    scripted,
    summary_fields,
)

FIELDS = summary_fields("fault")
BAD_JSON = ChatResponse(
    content=[ToolCallBlock(id="s1", name="write_summary", raw_input="{oops", input_error="bad")],
    stop_reason="tool_use",
)
EMPTY = ChatResponse(content=[])


@dataclass
class Case:
    """One fault: the scripts after priming, and the expected end."""

    model: list[Any]
    summarizer: list[Any] = field(default_factory=lambda: [FIELDS])
    raises: type[BaseException] | None = None
    method: str | None = "summary"  # the compression the reply must have done, if any
    prime: int = 3  # replies before the faulty one; 3 makes the 4th compress
    config: dict[str, Any] = field(default_factory=dict)
    check: Callable[[Agent, ScriptedModel], None] | None = None


def _error_result_names(name: str) -> Callable[[Agent, ScriptedModel], None]:
    def check(agent: Agent, model: ScriptedModel) -> None:
        # The last message may be the (unstored) usage hint; the results come before it.
        result = [m for m in model.requests[-1].messages if m.tool_results][-1].tool_results[0]
        assert result.is_error
        assert name in result.text()

    return check


def _retried(times: int) -> Callable[[Agent, ScriptedModel], None]:
    def check(agent: Agent, model: ScriptedModel) -> None:
        assert len(model.requests) == 3 + times + 1  # primes, failures, success

    return check


CASES: dict[str, Case] = {
    # -- the reasoning call
    "reason_429_retry_after": Case(
        [RateLimitError("429", retry_after=0.0), "ok"], check=_retried(1)
    ),
    "reason_5xx": Case([ServerError("500", status_code=500), "ok"], check=_retried(1)),
    "reason_timeout": Case([ModelTimeoutError("timed out"), "ok"], check=_retried(1)),
    "reason_connection": Case([ModelConnectionError("reset"), "ok"], check=_retried(1)),
    "reason_5xx_persistent": Case([ServerError("500")] * 3, raises=ServerError),  # 2 retries
    "reason_context_length": Case(
        [ContextWindowExceededError("too long"), "ok"], prime=2, method="summary"
    ),
    "reason_context_length_twice": Case(
        [ContextWindowExceededError("too long")] * 2, prime=2, raises=ContextWindowExceededError
    ),
    "reason_empty": Case([EMPTY], raises=EmptyResponseError),
    "reason_unexpected_exception": Case([RuntimeError("boom")], raises=RuntimeError),
    "reason_unknown_tool": Case(
        [tool_reply(("no_such_tool", {"x": 1})), "ok"], check=_error_result_names("no_such_tool")
    ),
    "reason_invalid_arguments": Case(
        [tool_reply(("add", {"a": "x", "b": 2})), "ok"], check=_error_result_names("a")
    ),
    "reason_malformed_arguments": Case(
        [
            tool_reply(ToolCallBlock(id="c9", name="add", raw_input='{"a": 1,', input_error="bad")),
            "ok",
        ],
        check=_error_result_names("add"),
    ),
    # -- the summary call and its structured output
    "summary_429": Case(["ok"], [RateLimitError("429", retry_after=0.0), FIELDS]),
    "summary_5xx": Case(["ok"], [ServerError("503", status_code=503), FIELDS]),
    "summary_timeout": Case(["ok"], [ModelTimeoutError("timed out"), FIELDS]),
    "summary_empty": Case(["ok"], [EMPTY, FIELDS]),
    "summary_malformed_json": Case(["ok"], [BAD_JSON, FIELDS]),
    "summary_invalid_fields": Case(["ok"], [{"task_overview": 3}, FIELDS]),
    "summary_no_tool_call": Case(["ok"], ["I will not summarise.", FIELDS]),
    "summary_json_in_text": Case(["ok"], [f"here: {__import__('json').dumps(FIELDS)}"]),
    "summary_context_length": Case(
        ["ok"], [ContextWindowExceededError("too long")] * 3, method="truncation"
    ),
    "summary_all_attempts_fail": Case(["ok"], ["no", {"x": 1}, EMPTY], method="truncation"),
    "summary_unexpected_exception": Case(["ok"], [RuntimeError("boom")] * 3, method="truncation"),
    "summary_fails_without_fallback": Case(
        [],
        ["no"] * 3,
        raises=CompressionError,
        method=None,
        config={"compression_fallback_to_truncation": False},
    ),
    # -- compression asked for by the model through the CompressContext tool
    "tool_compression_fails": Case(
        [tool_reply(("CompressContext", {})), "ok"],
        ["no"] * 3,
        prime=2,
        method=None,
        # over the tool's threshold, and under the trigger with the failed call's exchange
        config={"compression_tool_enabled": True, "trigger_ratio": 0.55},
        check=_error_result_names("context is unchanged"),
    ),
}


@pytest.mark.parametrize("mode", ["reply", "stream"])
@pytest.mark.parametrize("name", list(CASES))
async def test_model_fault_ends_cleanly_and_loses_nothing(name: str, mode: str) -> None:
    case = CASES[name]
    ws = MemoryWorkspace()
    await ws.initialize()
    primes = [f"prime answer {i} " + filler(i, 40) for i in range(case.prime)]
    model = scripted([*primes, *case.model])
    summarizer = scripted(list(case.summarizer))
    config = ContextConfig(**{"trigger_ratio": 0.5, "reserve_ratio": 0.1, **case.config})
    agent = make_agent(
        model, offloader=ws, summarizer=summarizer, config=config, toolkit=adder_toolkit()
    )
    added = Added(agent.engine)
    compressions: list[CompressionEvent] = []
    agent.engine.on_event = _collect(agent, compressions)
    for i in range(case.prime):
        await agent.reply(filler(100 + i, 80))
    assert not compressions, "priming must not compress"
    before_summary, before_context = agent.summary, [m.id for m in agent.context]

    outcome: BaseException | None = None
    try:
        if mode == "reply":
            await agent.reply(filler(999, 80))
        else:
            async for _ in agent.stream(filler(999, 80)):
                pass
    except Exception as exc:
        outcome = exc

    if case.raises is None:
        assert outcome is None, f"unexpected {outcome!r}"
    else:
        assert isinstance(outcome, case.raises), f"expected {case.raises}, got {outcome!r}"
    if case.method is None:
        assert not [e for e in compressions if e.trigger != "tool" or e.method == "summary"]
    else:
        assert [e.method for e in compressions] == [case.method]
    if isinstance(outcome, CompressionError):  # the context is exactly as it was, plus input
        assert agent.summary is before_summary
        assert [m.id for m in agent.context][:-1] == before_context
    if case.check is not None:
        case.check(agent, model)

    await _assert_history_intact(agent, ws, added, model, summarizer)
    # ...and the session goes on.
    model.add("recovered")
    summarizer.add(FIELDS, FIELDS)
    assert (await agent.reply("again")).text == "recovered"
    await _assert_history_intact(agent, ws, added, model, summarizer)
    record("model faults (ScriptedModel)", f"{name} [{mode}]")


async def _assert_history_intact(
    agent: Agent,
    ws: MemoryWorkspace,
    added: Added,
    model: ScriptedModel,
    summarizer: ScriptedModel,
) -> None:
    assert_provider_valid(agent)
    check_requests_valid(model.requests)
    check_requests_valid(summarizer.requests)
    stored = await offloaded(ws, agent.session_id)
    assert_nothing_lost(added.ids, [m.id for m in stored], [m.id for m in agent.context])


def _collect(agent: Agent, into: list[CompressionEvent]) -> Any:
    forward = agent.engine.on_event

    async def on_event(event: Any) -> None:
        if isinstance(event, CompressionEvent):
            into.append(event)
        if forward is not None:
            result = forward(event)
            if result is not None:
                await result

    return on_event
