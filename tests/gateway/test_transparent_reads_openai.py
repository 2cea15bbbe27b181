"""Offload and read-back on ``/v1/chat/completions`` and ``/v1/responses`` in transparent
mode, with the ``openai`` SDK as the client and a scripted model that calls the gateway's
read-back tool: the calls never reach the client, whole or streamed; streams keep their
grammar (one id, indexes and sequence numbers without a gap); usage is the sum of every
upstream call; the client's tools come first, unchanged; sessions stay apart."""

from __future__ import annotations

import json

import pytest

from contextfold.gateway import READ_TOOL, GatewayConfig, TransparentPolicy, create_app

from .openai_reader import (
    MODEL,
    chat_answer,
    chat_completion,
    then_chat_reader,
    then_responses_reader,
)
from .reads_client import (
    CHAT_TOOLS,
    RESPONSES_TOOLS,
    chat_history,
    gateway,
    responses_history,
)
from .servers import ScriptedUpstream, serving


@pytest.mark.parametrize("stream", [False, True])
def test_chat_read_back_is_answered_by_the_gateway(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    then_chat_reader(upstream, 2)
    with gateway(upstream) as client:
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model=MODEL,
                    messages=chat_history("NEEDLE-C"),
                    tools=CHAT_TOOLS,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            assert {c.id for c in chunks} == {"chatcmpl-4"}
            assert not any(READ_TOOL in c.model_dump_json() for c in chunks)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
            assert [f for f in finishes if f] == ["stop"]
            (usage_chunk,) = [c for c in chunks if not c.choices]
            usage = usage_chunk.usage
        else:
            reply = client.chat.completions.create(
                model=MODEL, messages=chat_history("NEEDLE-C"), tools=CHAT_TOOLS
            )
            assert READ_TOOL not in reply.model_dump_json()
            text = reply.choices[0].message.content or ""
            assert reply.choices[0].finish_reason == "stop"
            assert reply.choices[0].message.tool_calls is None
            usage = reply.usage
    assert text == "Reading the rest.\n\nFound: NEEDLE-C is defined in src/config.py:42"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 10, 110)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 80
    first, second = (r.json() for r in upstream.received)
    assert first["tools"][:-1] == CHAT_TOOLS
    assert first["tools"][-1]["function"]["name"] == READ_TOOL
    assert first["tools"] == second["tools"]
    assert "NEEDLE-C" not in json.dumps(first["messages"])
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert "NEEDLE-C" in second["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_read_back_beside_a_client_call_asks_again(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    shell = {
        "id": "call_shell_1",
        "type": "function",
        "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
    }
    then_chat_reader(upstream, 1, also=[shell])
    again = {**shell, "id": "call_shell_2"}
    upstream.then(lambda _r, got: chat_answer(chat_completion("", [again], 9), got.json()))
    with gateway(upstream) as client:
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model=MODEL, messages=chat_history("NEEDLE-M"), tools=CHAT_TOOLS, stream=True
                )
            )
            calls = [
                call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []
            ]
            assert {c.index for c in calls} == {0}
            assert [c.id for c in calls if c.id] == ["call_shell_2"]
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        else:
            reply = client.chat.completions.create(
                model=MODEL, messages=chat_history("NEEDLE-M"), tools=CHAT_TOOLS
            )
            assert [c.id for c in reply.choices[0].message.tool_calls or []] == ["call_shell_2"]
            assert reply.choices[0].finish_reason == "tool_calls"
    asked = upstream.received[1].json()["messages"][-2]
    assert [c["function"]["name"] for c in asked["tool_calls"]] == [READ_TOOL]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_read_back_is_answered_by_the_gateway(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    then_responses_reader(upstream, 2)
    with gateway(upstream) as client:
        if stream:
            events = list(
                client.responses.create(
                    model=MODEL,
                    input=responses_history("NEEDLE-R"),
                    tools=RESPONSES_TOOLS,
                    stream=True,
                )
            )
            assert not any(READ_TOOL in e.model_dump_json() for e in events)
            assert [e.sequence_number for e in events] == list(range(len(events)))
            names = [e.type for e in events]
            assert names[:2] == ["response.created", "response.in_progress"]
            assert names[-1] == "response.completed"
            assert names.count("response.completed") == 1
            added = [e.output_index for e in events if e.type == "response.output_item.added"]  # type: ignore[union-attr]
            assert added == list(range(len(added)))
            final = events[-1].response  # type: ignore[union-attr]
        else:
            final = client.responses.create(
                model=MODEL, input=responses_history("NEEDLE-R"), tools=RESPONSES_TOOLS
            )
    assert READ_TOOL not in final.model_dump_json()
    assert [o.type for o in final.output] == ["message", "message"]
    assert final.output_text == "Reading the rest.Found: NEEDLE-R is defined in src/config.py:42"
    assert final.id == "resp_6"  # the last round's: its stored context holds the exchange
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (80, 6)
    assert final.usage.input_tokens_details.cached_tokens == 60
    first, second = (r.json() for r in upstream.received)
    assert first["tools"][:-1] == RESPONSES_TOOLS
    assert first["tools"][-1]["name"] == READ_TOOL
    assert second["input"][: len(first["input"])] == first["input"]
    assert "NEEDLE-R" not in json.dumps(first["input"])
    assert "NEEDLE-R" in second["input"][-1]["output"]


def test_chat_sessions_side_by_side_never_read_each_others_items(
    upstream: ScriptedUpstream,
) -> None:
    then_chat_reader(upstream, 2)
    with gateway(upstream) as client:
        client.chat.completions.create(
            model=MODEL,
            messages=chat_history("NEEDLE-A"),
            tools=CHAT_TOOLS,
            extra_headers={"x-contextfold-session": "a"},
        )
        call = upstream.received[-1].json()["messages"][-2]["tool_calls"][0]
        stolen = {**call, "id": "call_read_x"}
        upstream.then_json(chat_completion("", [stolen], 1))
        upstream.then_json(chat_completion("B is done.", [], 2))
        reply = client.chat.completions.create(
            model=MODEL,
            messages=chat_history("NEEDLE-B"),
            tools=CHAT_TOOLS,
            extra_headers={"x-contextfold-session": "b"},
        )
    answer = upstream.received[-1].json()["messages"][-1]
    item = json.loads(call["function"]["arguments"])["id"]
    assert answer["content"] == f"no item {item} in this conversation"
    assert "NEEDLE-A" not in json.dumps(upstream.received[-1].json())
    assert reply.choices[0].message.content == "B is done."


def test_without_a_tool_result_limit_the_openai_routes_are_relayed_byte_for_byte(
    upstream: ScriptedUpstream,
) -> None:
    routes = {"/v1/chat/completions": TransparentPolicy(window=1_000_000)}
    upstream.then_json(chat_completion("hi", [], 1))
    app = create_app(GatewayConfig(upstream=upstream.url), transparent=routes)
    raw = b'{"model": "gpt-test",  "messages": [{"role": "user", "content": "hi"}]}'
    import httpx

    with serving(app) as url:
        httpx.post(f"{url}/v1/chat/completions", content=raw, headers={"authorization": "Bearer x"})
    assert upstream.received[0].body == raw


def test_a_chained_responses_request_chains_its_read_back_round(
    upstream: ScriptedUpstream,
) -> None:
    """With ``previous_response_id`` the upstream holds the conversation: the next round
    is chained to the round that called the tool, with only the gateway's output as input."""
    then_responses_reader(upstream, 2)
    with gateway(upstream) as client:
        final = client.responses.create(
            model=MODEL,
            previous_response_id="resp_earlier",
            input=responses_history("NEEDLE-P")[2:],
            tools=RESPONSES_TOOLS,
        )
    assert final.output_text.endswith("Found: NEEDLE-P is defined in src/config.py:42")
    first, second = (r.json() for r in upstream.received)
    assert first["previous_response_id"] == "resp_earlier"
    assert second["previous_response_id"] == "resp_1"  # the round that called the tool
    (output,) = second["input"]
    assert output["type"] == "function_call_output"
    assert output["call_id"] == "call_read_1"
    assert "NEEDLE-P" in output["output"]
