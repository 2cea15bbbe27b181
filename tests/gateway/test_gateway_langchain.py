"""LangChain's own chat models pointed at the gateway, as their users run them: a tool loop
over several turns with ``ChatAnthropic(context_management=...)`` (edits applied by the
gateway, reported back in ``response_metadata``), compaction blocks carried by LangChain's
messages into the next turn, and ``ChatOpenAI`` through the gateway to llama.cpp's server."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_anthropic", reason="needs langchain-anthropic (dev extra)")

from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from contextfold.gateway import CLEARED_RESULT, SUMMARY_PREFIX

from .conftest import SECRET
from .servers import ScriptedUpstream, message, sse

MODEL = "claude-test"


@tool
def bash(command: str) -> str:
    """Run a shell command."""
    return f"$ {command}\n" + "log line\n" * 400


def tool_use(i: int, command: str) -> dict[str, Any]:
    """An upstream answer that calls ``bash``."""
    return message(
        "",
        content=[
            {"type": "text", "text": f"Step {i}."},
            {
                "type": "tool_use",
                "id": f"toolu_{i:02d}",
                "name": "bash",
                "input": {"command": command},
            },
        ],
        stop_reason="tool_use",
    )


def tool_results(body: dict[str, Any]) -> list[Any]:
    return [
        b["content"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def starts_with_summary(body: dict[str, Any]) -> bool:
    first = body["messages"][0]["content"]
    return isinstance(first, list) and first[0].get("text", "").startswith(SUMMARY_PREFIX)


def run_loop(model: Any, messages: list[BaseMessage]) -> AIMessage:
    """LangChain's plain tool loop: call the model, run its tool calls, until it answers."""
    while True:
        answer = model.invoke(messages)
        messages.append(answer)
        if not answer.tool_calls:
            return answer  # type: ignore[no-any-return]
        for call in answer.tool_calls:
            messages.append(ToolMessage(bash.invoke(call["args"]), tool_call_id=call["id"]))


def clearing(trigger: int) -> dict[str, Any]:
    return {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": trigger},
                "keep": {"type": "tool_uses", "value": 1},
            }
        ]
    }


def test_chat_anthropic_tool_loop_gets_its_edits_applied_over_several_turns(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    model = ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        base_url=gateway,
        api_key=SECRET,
        max_retries=0,
        max_tokens=256,
        betas=["context-management-2025-06-27"],
        context_management=clearing(trigger=1_500),
    ).bind_tools([bash])
    messages: list[BaseMessage] = [HumanMessage("Why does the build fail?")]
    for i in range(3):
        upstream.then_json(tool_use(i, f"make step{i}"))
    upstream.then_json(message("The linker flags are wrong."))
    first = run_loop(model, messages)
    assert first.content == "The linker flags are wrong."

    # Second user turn, same conversation: two more tool calls.
    messages.append(HumanMessage("Fix it and rerun the tests."))
    for i in range(3, 5):
        upstream.then_json(tool_use(i, f"pytest -k t{i}"))
    upstream.then_json(message("Fixed; tests pass."))
    second = run_loop(model, messages)
    assert second.content == "Fixed; tests pass."

    bodies = [r.json() for r in upstream.received]
    assert len(bodies) == 7
    assert all("context_management" not in b for b in bodies)  # emulated, not forwarded
    last = bodies[-1]
    results = tool_results(last)
    assert len(results) == 5
    # Every result but the newest one is cleared; the user's messages are all there.
    assert results[:4] == [CLEARED_RESULT] * 4
    assert "log line" in json.dumps(results[4])
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    text = json.dumps(users)
    assert "Why does the build fail?" in text
    assert "Fix it and rerun the tests." in text
    # LangChain surfaces what the gateway reports.
    applied = second.response_metadata["context_management"]["applied_edits"]
    assert applied
    assert applied[0]["type"] == "clear_tool_uses_20250919"
    assert applied[0]["cleared_tool_uses"] == 4


def test_chat_anthropic_streaming_reports_the_edits_on_the_final_delta(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    history: list[BaseMessage] = [HumanMessage("Check the logs.")]
    for i in range(3):
        history.append(
            AIMessage(
                content=[
                    {"type": "text", "text": f"Step {i}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:02d}",
                        "name": "bash",
                        "input": {"command": f"cat log{i}"},
                    },
                ],
                tool_calls=[
                    {"name": "bash", "args": {"command": f"cat log{i}"}, "id": f"toolu_{i:02d}"}
                ],
            )
        )
        history.append(
            ToolMessage(bash.invoke({"command": f"cat log{i}"}), tool_call_id=f"toolu_{i:02d}")
        )
    start = message("")
    start["content"] = []
    upstream.then(
        lambda _r, _x: _stream_response(
            [
                ("message_start", {"type": "message_start", "message": start}),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "All clear."},
                    },
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": 3},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
        )
    )
    model = ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        base_url=gateway,
        api_key=SECRET,
        max_retries=0,
        max_tokens=256,
        streaming=True,
        betas=["context-management-2025-06-27"],
        context_management=clearing(trigger=1_000),
    ).bind_tools([bash])
    chunks = list(model.stream(history))
    whole = chunks[0]
    for c in chunks[1:]:
        whole = whole + c
    assert "All clear." in json.dumps(whole.content)
    applied = whole.response_metadata["context_management"]["applied_edits"]
    assert applied[0]["cleared_tool_uses"] == 2
    assert tool_results(upstream.received[0].json())[:2] == [CLEARED_RESULT] * 2


def _stream_response(events: list[tuple[str, dict[str, Any]]]) -> Any:
    from starlette.responses import Response

    return Response(sse(events), media_type="text/event-stream")


def test_chat_anthropic_carries_the_compaction_block_into_the_next_turn(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    model = ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        base_url=gateway,
        api_key=SECRET,
        max_retries=0,
        max_tokens=256,
        betas=["compact-2026-01-12"],
        context_management={
            "edits": [
                {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1_500}}
            ]
        },
    ).bind_tools([bash])
    messages: list[BaseMessage] = [HumanMessage("Find why test_login fails.")]
    for i in range(4):
        upstream.then_json(tool_use(i, f"grep -rn login src{i}"))
    upstream.then_json(message("The session cookie expires early."))
    answer = run_loop(model, messages)
    kinds = [b.get("type") for b in answer.content if isinstance(b, dict)]  # type: ignore[union-attr]
    compacted_at = [i for i, r in enumerate(upstream.received) if starts_with_summary(r.json())]
    assert compacted_at, "the history crossed the trigger: one request must carry the summary"
    # The turn that compacted returned the block; LangChain keeps it in the AI message.
    blocks = [
        m
        for m in messages
        if isinstance(m, AIMessage)
        and any(isinstance(b, dict) and b.get("type") == "compaction" for b in m.content)
    ]
    assert blocks, kinds

    # Next user turn: LangChain sends the block back; the upstream sees the summary in its
    # place and never a compaction block, and nothing from before it.
    upstream.then_json(message("Done."))
    messages.append(HumanMessage("Now fix it."))
    run_loop(model, messages)
    body = upstream.received[-1].json()
    sent = json.dumps(body["messages"])
    assert '"compaction"' not in sent
    assert starts_with_summary(body)
    assert {"role": "user", "content": "Find why test_login fails."} not in body["messages"]
    assert "Now fix it." in sent
    assert "context_management" not in body


@pytest.mark.slow
def test_chat_openai_talks_to_llama_server_through_the_gateway(llama_server: str) -> None:
    from langchain_openai import ChatOpenAI

    from contextfold.gateway import GatewayConfig, create_app

    from .servers import serving

    with serving(create_app(GatewayConfig(upstream=llama_server, timeout=120))) as url:
        model = ChatOpenAI(
            model="smollm2",
            base_url=f"{url}/v1",
            api_key=SECRET,  # type: ignore[arg-type]
            max_retries=0,
            temperature=0,
            # langchain-openai sends max_completion_tokens, which llama.cpp's server ignores
            extra_body={"max_tokens": 8},
        )
        turns: list[BaseMessage] = [HumanMessage("Name a colour.")]
        first = model.invoke(turns)
        assert isinstance(first.content, str)
        assert first.content
        assert first.usage_metadata
        assert first.usage_metadata["input_tokens"] > 0
        turns += [first, HumanMessage("And another one.")]
        chunks = list(model.stream(turns))
        assert len(chunks) > 1
        assert "".join(str(c.content) for c in chunks)
        import httpx

        metrics = httpx.get(f"{url}/metrics").text
        counted = [
            line
            for line in metrics.splitlines()
            if line.startswith("contextfold_gateway_requests_total{") and 'status="200"' in line
        ]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in counted) >= 2
