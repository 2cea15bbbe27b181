"""``contextfold serve`` with no ``--upstream``: the embedded model answers both wire formats
behind the gateway. The official SDKs are the clients; the shapes are unit-checked with a
scripted model, then the real embedded model runs end to end, and the CLI starts with no
key and no upstream."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack

import anthropic
import httpx
import openai
import pytest

from contextfold.gateway import CLEARED_RESULT, GatewayConfig, create_app, serving_upstream
from contextfold.model import ChatModelBase, ScriptedModel, tool_reply

from .history import tool_history
from .servers import free_port, serving
from .test_gateway_messages import check_anthropic_event_order, events_of

TOOLS = [
    {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]


def gateway_over(model: ChatModelBase) -> Iterator[str]:
    with ExitStack() as stack:
        upstream = stack.enter_context(serving_upstream(model))
        yield stack.enter_context(
            serving(create_app(GatewayConfig(upstream=upstream, timeout=120)))
        )


@pytest.fixture
def scripted() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def scripted_gateway(scripted: ScriptedModel) -> Iterator[str]:
    yield from gateway_over(scripted)


def test_anthropic_messages_with_edits_reach_the_model_and_come_back(
    scripted: ScriptedModel, scripted_gateway: str
) -> None:
    scripted.add(*["The linter is clean."])
    client = anthropic.Anthropic(base_url=scripted_gateway, api_key="unused", max_retries=0)
    answer = client.beta.messages.create(
        model="smollm2",
        max_tokens=64,
        system="You are terse.",
        messages=tool_history(6),  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        context_management={
            "edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": 1_000},
                    "keep": {"type": "tool_uses", "value": 2},
                }
            ]
        },
        betas=["context-management-2025-06-27"],
    )
    assert answer.content[0].text == "The linter is clean."  # type: ignore[union-attr]
    assert answer.stop_reason == "end_turn"
    assert answer.usage.input_tokens > 0
    assert answer.context_management is not None
    assert answer.context_management.applied_edits[0].cleared_tool_uses == 4  # type: ignore[union-attr]
    # What the model received: the system prompt, the cleared results, the newest two kept.
    (seen,) = scripted.requests
    assert seen.messages[0].role == "system"
    results = [r.text() for m in seen.messages for r in m.tool_results]
    assert results[:4] == [CLEARED_RESULT] * 4
    assert results[4].startswith("output 4")
    assert [t.name for t in seen.tools] == ["bash"]


def test_a_tool_call_streams_in_the_documented_event_order(
    scripted: ScriptedModel, scripted_gateway: str
) -> None:
    scripted.add(*[tool_reply(("bash", {"command": "ls"}), text="Listing.")])
    raw = httpx.post(
        f"{scripted_gateway}/v1/messages",
        json={
            "model": "smollm2",
            "max_tokens": 64,
            "stream": True,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "What is here?"}],
        },
        headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    events = events_of(raw.content)
    check_anthropic_event_order(events)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["text", "tool_use"]
    partial = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["index"] == 1
    ]
    assert partial == ['{"command": "ls"}']
    (delta,) = [d for n, d in events if n == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"

    # The official SDK assembles the same stream.
    scripted.add(*[tool_reply(("bash", {"command": "ls"}), text="Listing.")])
    client = anthropic.Anthropic(base_url=scripted_gateway, api_key="unused", max_retries=0)
    with client.messages.stream(
        model="smollm2",
        max_tokens=64,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "What is here?"}],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"command": "ls"}  # type: ignore[union-attr]


def test_openai_chat_completions_with_tools_streamed_or_not(
    scripted: ScriptedModel, scripted_gateway: str
) -> None:
    client = openai.OpenAI(base_url=f"{scripted_gateway}/v1", api_key="unused", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in TOOLS
    ]
    scripted.add(*[tool_reply(("bash", {"command": "pwd"})), "Here."])
    ask = [{"role": "user", "content": "Where am I?"}]
    first = client.chat.completions.create(model="smollm2", messages=ask, tools=tools)  # type: ignore[arg-type]
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "bash"  # type: ignore[union-attr]
    assert first.choices[0].finish_reason == "tool_calls"
    follow = [
        *ask,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "/work"},
    ]
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=follow,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Here."
    assert chunks[-1].usage is not None
    # The model saw the tool result paired with its call.
    seen = scripted.requests[-1].messages
    assert [r.text() for m in seen for r in m.tool_results] == ["/work"]


def test_a_body_that_is_not_json_gets_each_providers_error(scripted_gateway: str) -> None:
    for path, shape in (("/v1/chat/completions", "error"), ("/v1/messages", "type")):
        got = httpx.post(
            f"{scripted_gateway}{path}",
            content=b"{not json",
            headers={"content-type": "application/json", "x-api-key": "unused"},
        )
        assert got.status_code == 400
        assert shape in got.json()


@pytest.mark.slow
@pytest.mark.model  # runs the embedded model
def test_the_embedded_model_answers_through_the_gateway() -> None:
    pytest.importorskip("cyllama", reason="needs contextfold[local]")
    from contextfold.model import LocalChatModel

    model = LocalChatModel(max_tokens=16)
    for url in gateway_over(model):
        client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
        answer = client.messages.create(
            model="smollm2",
            max_tokens=12,
            messages=[{"role": "user", "content": "Say hello."}],
        )
        assert answer.content[0].text  # type: ignore[union-attr]
        assert answer.usage.input_tokens > 0
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        streamed = chat.chat.completions.create(
            model="smollm2",
            max_tokens=12,
            messages=[{"role": "user", "content": "Say hello."}],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)


@pytest.mark.slow
@pytest.mark.model  # runs the embedded model
def test_serve_without_upstream_starts_the_embedded_model() -> None:
    pytest.importorskip("cyllama", reason="needs contextfold[local]")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextfold.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.2)
        assert health.json()["upstream"].startswith("http://127.0.0.1:")
        got = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            json={
                "model": "smollm2",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "Hi"}],
            },
            headers={"anthropic-version": "2023-06-01"},
            timeout=60,
        )
        assert got.status_code == 200, got.text
        assert got.json()["content"][0]["type"] == "text"
    finally:
        proc.terminate()
        proc.wait(10)
