"""Transparent mode on ``/v1/chat/completions`` with the official ``openai`` SDK as the
client: the system messages forwarded as sent, oversized tool results cut, the previous
prefix forwarded again byte for byte except once per compaction, no tool call separated
from its result, conversations kept apart, state surviving a restart in SQLite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app
from contextfold.gateway._retrieval import chat_read_tool
from contextfold.workspace import SQLiteWorkspace

from .conftest import SECRET
from .servers import ScriptedUpstream, serving

SYSTEM = "You are a coding agent. Work in the repository; use the bash tool."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
CHAT = "/v1/chat/completions"
POLICY = TransparentPolicy(window=8_000, trigger=0.8, keep=0.25, tool_result_limit=600)


def completion(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@contextmanager
def chat_gateway(upstream: ScriptedUpstream, **kwargs: Any) -> Iterator[str]:
    app = create_app(GatewayConfig(upstream=upstream.url), transparent={CHAT: POLICY}, **kwargs)
    with serving(app) as url:
        yield url


class ChatConversation:
    """An OpenAI-compatible agent's tool loop: it keeps its whole history and resends it."""

    def __init__(self, task: str, *, tag: str = "item", size: int = 1_200) -> None:
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task},
        ]
        self.tag = tag
        self.size = size
        self.turns = 0

    def step(self) -> None:
        i = self.turns
        self.turns += 1
        call = f"call_{self.tag}_{i:03d}"
        arguments = json.dumps({"command": f"grep -rn {self.tag}_{i} src/"})
        self.history.append(
            {
                "role": "assistant",
                "content": f"Checking {self.tag} step {i}.",
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "bash", "arguments": arguments},
                    }
                ],
            }
        )
        output = f"src/{self.tag}_{i}.py:{i}: {self.tag}_{i} = compute({i})\n" * (self.size // 10)
        self.history.append({"role": "tool", "tool_call_id": call, "content": output})

    def send(self, url: str, upstream: ScriptedUpstream, **extra: Any) -> dict[str, Any]:
        upstream.then_json(completion())
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        client.chat.completions.create(
            model="m",
            messages=self.history,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            **extra,
        )
        got = upstream.received[-1]
        assert got.path == CHAT
        body: dict[str, Any] = got.json()
        return body


def run(
    conversation: ChatConversation, url: str, upstream: ScriptedUpstream, turns: int
) -> list[dict[str, Any]]:
    bodies = []
    for _ in range(turns):
        conversation.step()
        bodies.append(conversation.send(url, upstream))
    return bodies


def dumped(messages: list[Any]) -> list[bytes]:
    return [json.dumps(m, ensure_ascii=False).encode() for m in messages]


def prefix_kept(before: dict[str, Any], after: dict[str, Any]) -> bool:
    old, new = dumped(before["messages"]), dumped(after["messages"])
    return before["tools"] == after["tools"] and new[: len(old)] == old


def is_summary(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith("This conversation continues")
    )


def pairs_intact(messages: list[dict[str, Any]]) -> bool:
    """Every tool message answers a call of the assistant message before the run of tool
    messages it is in, and every call is answered."""
    open_calls: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            if open_calls:
                return False
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            if m["tool_call_id"] not in open_calls:
                return False
            open_calls.discard(m["tool_call_id"])
        elif open_calls:
            return False
    return True


def test_a_tool_loop_is_cut_and_compacted_with_the_prefix_kept_between_compactions(
    upstream: ScriptedUpstream,
) -> None:
    conversation = ChatConversation("Find every item and fix it.")
    with chat_gateway(upstream) as url:
        bodies = run(conversation, url, upstream, 30)
        metrics = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET)._client.get(f"{url}/metrics")
    for body in bodies:
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert pairs_intact(body["messages"][1:])
        assert body["tools"] == [*TOOLS, chat_read_tool()]  # the read-back tool, last
    # Tool results over the limit are cut, each the same way every time it is resent.
    sent = bodies[-1]["messages"][-1]["content"]
    assert "tokens of this tool result omitted by the gateway" in sent
    assert len(sent) < len(conversation.history[-1]["content"]) / 2
    compactions = [i for i in range(1, len(bodies)) if is_summary(bodies[i]["messages"][1])]
    first = compactions[0] if compactions else None
    assert first is not None, "30 turns of cut results pass 80% of 8,000 tokens"
    assert not is_summary(bodies[first - 1]["messages"][1])
    changes = [i for i in range(1, len(bodies)) if not prefix_kept(bodies[i - 1], bodies[i])]
    changed_summary = [
        i
        for i in range(1, len(bodies))
        if bodies[i]["messages"][1] != bodies[i - 1]["messages"][1]
        and is_summary(bodies[i]["messages"][1])
    ]
    assert changes == changed_summary, "the prefix changes only when a summary is written"
    assert "contextfold_gateway_compactions_total" in metrics.text
    compacted = [
        line
        for line in metrics.text.splitlines()
        if line.startswith("contextfold_gateway_compactions_total")
    ]
    assert compacted == [f"contextfold_gateway_compactions_total {len(changes)}"]
    # The summary names what the folded turns did (the extractive summarizer read them).
    assert "item_0" in bodies[first]["messages"][1]["content"]


def test_two_conversations_side_by_side_never_see_each_other(
    upstream: ScriptedUpstream,
) -> None:
    a = ChatConversation("Fix the alpha service.", tag="alpha")
    b = ChatConversation("Fix the beta service.", tag="beta")
    seen: dict[str, list[str]] = {"alpha": [], "beta": []}
    with chat_gateway(upstream) as url:
        for _ in range(25):
            for conversation in (a, b):
                conversation.step()
                body = conversation.send(url, upstream)
                seen[conversation.tag].append(json.dumps(body["messages"]))
    assert any("This conversation continues" in s for s in seen["alpha"])
    assert any("This conversation continues" in s for s in seen["beta"])
    assert not any("beta" in s for s in seen["alpha"])
    assert not any("alpha" in s for s in seen["beta"])


def test_a_restarted_gateway_forwards_what_an_uninterrupted_one_does(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    steady = ChatConversation("Find every item and fix it.")
    with chat_gateway(upstream) as url:
        expected = run(steady, url, upstream, 24)

    resumed = ChatConversation("Find every item and fix it.")
    got: list[dict[str, Any]] = []
    for part in (13, 11):  # restart after 13 turns, past the first compaction
        store = SQLiteWorkspace(tmp_path / "state")
        with chat_gateway(upstream, sessions=store) as url:
            got.extend(run(resumed, url, upstream, part))
        asyncio.run(store.close())
    assert any(is_summary(b["messages"][1]) for b in expected[:13])
    assert dumped([m for b in got for m in b["messages"]]) == dumped(
        [m for b in expected for m in b["messages"]]
    )


def test_a_stream_is_relayed_and_a_request_without_messages_passes_through(
    upstream: ScriptedUpstream,
) -> None:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "pong"}, "finish_reason": None}],
    }
    from starlette.responses import StreamingResponse

    async def chunks() -> Any:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    upstream.then(lambda _r, _x: StreamingResponse(chunks(), media_type="text/event-stream"))
    conversation = ChatConversation("Say pong.")
    with chat_gateway(upstream) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        stream = client.chat.completions.create(
            model="m",
            messages=conversation.history,  # type: ignore[arg-type]
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "pong"
        assert upstream.received[-1].json()["messages"] == conversation.history
        upstream.then_json({"error": {"message": "messages is required"}}, status=400)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=None)  # type: ignore[arg-type]
        assert upstream.received[-1].json() == {"model": "m", "messages": None}  # as sent
