"""The clients' side of the read-back tests (transparent mode's offload and read-back,
``test_transparent_reads*.py``): the conversations they send, the gateways they talk to,
and the checks of what comes back (no read-back call leaked, Anthropic's stream grammar)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai

from contextfold.gateway import READ_TOOL, GatewayConfig, TransparentPolicy, create_app

from .conftest import SECRET
from .servers import ScriptedUpstream, serving
from .test_transparent import MODEL, SYSTEM, TOOLS, Conversation

POLICY = TransparentPolicy(window=1_000_000, tool_result_limit=400)


def big_result(needle: str, lines: int = 60) -> str:
    """A long tool output with ``needle`` where the cut leaves it out (on the first page
    read back)."""
    out = [f"src/module_{i}.py:{i}: value_{i} = compute({i})" for i in range(lines)]
    out[lines // 4] = f"{needle} is defined in src/config.py:42"
    return "\n".join(out)


class Agent(Conversation):
    """A Claude Code-like client whose last tool call returned a long result."""

    def __init__(self, task: str, needle: str, **kw: Any) -> None:
        super().__init__(task, **kw)
        self.needle = needle

    def long_step(self) -> None:
        i = self.turns
        self.turns += 1
        self.history.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{i:03d}", "name": "bash", "input": {}}
                ],
            }
        )
        self.history.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i:03d}",
                        "content": big_result(f"{self.needle}-{i}"),
                    }
                ],
            }
        )

    def answered(self, reply: Any) -> None:
        """The client keeps the answer it saw, as an agent does."""
        self.history.append(
            {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
        )


def leaks(raw: bytes | str) -> bool:
    text = raw if isinstance(raw, str) else raw.decode()
    return READ_TOOL in text


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in raw.decode().strip().split("\n\n"):
        lines = chunk.split("\n")
        name = lines[0].removeprefix("event: ")
        out.append((name, json.loads(lines[1].removeprefix("data: "))))
    return out


def check_grammar(stream: list[tuple[str, dict[str, Any]]]) -> None:
    """Anthropic's documented order: message_start; for each block in index order from 0,
    start, deltas, stop; one message_delta; message_stop. Pings anywhere."""
    names = [n for n, _ in stream if n != "ping"]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_start") == names.count("message_delta") == 1
    expected = 0
    open_index: int | None = None
    for name, data in stream:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None
            assert data["index"] == expected
            open_index = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index, expected = None, expected + 1
    assert open_index is None


def stream_body(agent: Agent) -> dict[str, Any]:
    """A streamed ``/v1/messages`` request of ``agent``'s conversation."""
    return {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": agent.wire(),
    }


def post_stream(url: str, agent: Agent) -> bytes:
    """The raw bytes of a streamed request of ``agent``'s conversation, sent with httpx."""
    return httpx.post(
        f"{url}/v1/messages",
        json=stream_body(agent),
        headers={"x-api-key": SECRET, "anthropic-version": "2023-06-01"},
    ).content


def sdk_stream(url: str, agent: Agent) -> tuple[str, Any]:
    """A streamed request of ``agent``'s conversation from the ``anthropic`` SDK: the text
    it streamed and the final message it accumulated."""
    sdk = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
    with sdk.messages.stream(
        model=MODEL,
        max_tokens=64,
        system=SYSTEM,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=agent.wire(),  # type: ignore[arg-type]
        extra_headers=agent.headers,
    ) as stream:
        text = "".join(stream.text_stream)
        return text, stream.get_final_message()


# -- OpenAI's routes ------------------------------------------------------------------------

ROUTES = {"/v1/chat/completions": POLICY, "/v1/responses": POLICY}
CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]


@contextmanager
def gateway(upstream: ScriptedUpstream) -> Iterator[openai.OpenAI]:
    app = create_app(GatewayConfig(upstream=upstream.url), transparent=ROUTES)
    with serving(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)


def chat_history(needle: str) -> list[Any]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Where is the needle defined?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"cmd": "grep -rn ."}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": big_result(needle)},
    ]


def responses_history(needle: str) -> list[Any]:
    return [
        {"role": "user", "content": "Where is the needle defined?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"cmd": "grep -rn ."}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": big_result(needle)},
    ]
