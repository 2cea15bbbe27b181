"""Transparent mode on ``/v1/responses`` with the official ``openai`` SDK as the client, in
a Codex-like loop (``store: false``, the whole input resent each turn: developer message,
reasoning items, function calls and their outputs): outputs over the limit cut, the prefix
forwarded again byte for byte except once per compaction, every call kept with its
output and every reasoning item with its call, conversations kept apart, a restart with
SQLite state, and requests that are not this mode's left alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app
from contextfold.workspace import SQLiteWorkspace

from .conftest import SECRET
from .servers import ScriptedUpstream, serving
from .test_responses import SUMMARY_PREFIX, key_file, response, text_of

__all__ = ["key_file"]  # the autouse fixture: each test seals with a key of its own

ROUTE = "/v1/responses"
POLICY = TransparentPolicy(window=8_000, trigger=0.8, keep=0.25, tool_result_limit=600)
INSTRUCTIONS = "You are Codex, a coding agent."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]


@contextmanager
def responses_gateway(upstream: ScriptedUpstream, **kwargs: Any) -> Iterator[str]:
    app = create_app(GatewayConfig(upstream=upstream.url), transparent={ROUTE: POLICY}, **kwargs)
    with serving(app) as url:
        yield url


class CodexLoop:
    """Codex's request shape: a developer message, the user's task, then per turn a
    reasoning item, a function call and its output, all resent every turn."""

    def __init__(self, task: str, *, tag: str = "item", size: int = 1_200) -> None:
        self.items: list[dict[str, Any]] = [
            {"type": "message", "role": "developer", "content": "Sandbox: workspace-write."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
        ]
        self.tag = tag
        self.size = size
        self.turns = 0

    def step(self) -> None:
        i = self.turns
        self.turns += 1
        call = f"call_{self.tag}_{i:03d}"
        self.items.append(
            {
                "type": "reasoning",
                "id": f"rs_{self.tag}_{i}",
                "summary": [{"type": "summary_text", "text": f"Look at {self.tag}_{i}."}],
                "encrypted_content": f"gAAAA{self.tag}{i:04d}",
            }
        )
        self.items.append(
            {
                "type": "function_call",
                "call_id": call,
                "name": "shell",
                "arguments": json.dumps({"cmd": f"grep -rn {self.tag}_{i} src/"}),
            }
        )
        output = f"src/{self.tag}_{i}.py:{i}: {self.tag}_{i} = compute({i})\n" * (self.size // 10)
        self.items.append({"type": "function_call_output", "call_id": call, "output": output})

    def send(self, url: str, upstream: ScriptedUpstream, **extra: Any) -> dict[str, Any]:
        upstream.then_json(response("ok"))
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        client.responses.create(
            model="gpt-test",
            instructions=INSTRUCTIONS,
            input=self.items,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            store=False,
            **extra,
        )
        got = upstream.received[-1]
        assert got.path == ROUTE
        body: dict[str, Any] = got.json()
        return body


def run(loop: CodexLoop, url: str, upstream: ScriptedUpstream, turns: int) -> list[dict[str, Any]]:
    bodies = []
    for _ in range(turns):
        loop.step()
        bodies.append(loop.send(url, upstream))
    return bodies


def dumped(items: list[Any]) -> list[bytes]:
    return [json.dumps(i, ensure_ascii=False).encode() for i in items]


def is_summary(item: dict[str, Any]) -> bool:
    return item.get("role") == "user" and text_of(item).startswith(SUMMARY_PREFIX)


def intact(items: list[dict[str, Any]]) -> bool:
    """Every output follows its call; every call follows its reasoning item."""
    calls: set[str] = set()
    for k, item in enumerate(items):
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
            if items[k - 1].get("type") != "reasoning":
                return False
        if item.get("type") == "function_call_output" and item["call_id"] not in calls:
            return False
    return True


def test_a_codex_loop_is_cut_and_compacted_with_the_prefix_kept_between_compactions(
    upstream: ScriptedUpstream,
) -> None:
    loop = CodexLoop("Find every item and fix it.")
    with responses_gateway(upstream) as url:
        bodies = run(loop, url, upstream, 30)
    for body in bodies:
        assert body["instructions"] == INSTRUCTIONS
        assert body["input"][0] == loop.items[0]  # the developer message, as sent
        assert intact(body["input"])
        assert body["store"] is False
    last = bodies[-1]["input"][-1]["output"]
    assert "tokens of this tool result omitted by the gateway" in last
    summarized = [i for i, b in enumerate(bodies) if is_summary(b["input"][1])]
    assert summarized, "30 turns of cut outputs pass 80% of 8,000 tokens"
    changes = [
        i
        for i in range(1, len(bodies))
        if dumped(bodies[i]["input"])[: len(bodies[i - 1]["input"])]
        != dumped(bodies[i - 1]["input"])
    ]
    new_summaries = [
        i
        for i in range(1, len(bodies))
        if is_summary(bodies[i]["input"][1]) and bodies[i]["input"][1] != bodies[i - 1]["input"][1]
    ]
    assert changes == new_summaries
    first = summarized[0]
    assert "item_0" in text_of(bodies[first]["input"][1])
    # The kept items start on a model turn: a reasoning item right after the summary.
    assert bodies[first]["input"][2]["type"] == "reasoning"


def test_two_codex_loops_side_by_side_never_see_each_other(upstream: ScriptedUpstream) -> None:
    a, b = CodexLoop("Fix alpha.", tag="alpha"), CodexLoop("Fix beta.", tag="beta")
    seen: dict[str, list[str]] = {"alpha": [], "beta": []}
    with responses_gateway(upstream) as url:
        for _ in range(25):
            for loop in (a, b):
                loop.step()
                seen[loop.tag].append(json.dumps(loop.send(url, upstream)["input"]))
    assert any(SUMMARY_PREFIX in s for s in seen["alpha"])
    assert any(SUMMARY_PREFIX in s for s in seen["beta"])
    assert not any("beta" in s for s in seen["alpha"])
    assert not any("alpha" in s for s in seen["beta"])


def test_a_restarted_gateway_forwards_what_an_uninterrupted_one_does(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    with responses_gateway(upstream) as url:
        expected = run(CodexLoop("Find every item and fix it."), url, upstream, 24)
    resumed = CodexLoop("Find every item and fix it.")
    got: list[dict[str, Any]] = []
    for part in (13, 11):
        store = SQLiteWorkspace(tmp_path / "sessions")
        with responses_gateway(upstream, sessions=store) as url:
            got.extend(run(resumed, url, upstream, part))
        asyncio.run(store.close())
    assert any(is_summary(b["input"][1]) for b in expected[:13])
    assert [dumped(b["input"]) for b in got] == [dumped(b["input"]) for b in expected]


def test_requests_that_are_not_this_modes_go_upstream_as_sent(upstream: ScriptedUpstream) -> None:
    client_body = {"model": "gpt-test", "input": "hello", "previous_response_id": "resp_1"}
    with responses_gateway(upstream) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        for body in (
            client_body,
            {"model": "gpt-test", "input": "a string input"},
        ):
            upstream.then_json(response("ok"))
            client.responses.create(**body)  # type: ignore[call-overload]
            assert upstream.received[-1].json() == body


def test_a_chained_request_is_cut_and_never_compacted(upstream: ScriptedUpstream) -> None:
    loop = CodexLoop("Find every item and fix it.")
    for _ in range(30):
        loop.step()
    with responses_gateway(upstream) as url:
        body = loop.send(url, upstream, previous_response_id="resp_0")
    assert not is_summary(body["input"][1])
    assert len(body["input"]) == len(loop.items)
    assert "omitted by the gateway" in body["input"][-1]["output"]
