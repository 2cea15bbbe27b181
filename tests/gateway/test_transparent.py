"""Transparent mode with the official ``anthropic`` SDK as the client: what the upstream
receives turn after turn (the previous prefix again, byte for byte, changed only by a
compaction), sessions kept apart, state surviving a restart in SQLite, breakpoints."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest

from contextfold.gateway import (
    CountCache,
    GatewayConfig,
    SessionState,
    TransparentPolicy,
    create_app,
    session_key,
)
from contextfold.token import AnthropicEstimator
from contextfold.workspace import SQLiteWorkspace

from .conftest import SECRET
from .servers import ScriptedUpstream, message, message_stream, serving

MODEL = "claude-test"
SYSTEM = "You are a coding agent. Work in the repository; use the tools."
TOOLS: list[dict[str, Any]] = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
POLICY = TransparentPolicy(window=8_000, trigger=0.8, keep=0.25)
CLAUDE_CODE_EDITS: Any = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)


@contextmanager
def transparent_gateway(
    upstream: ScriptedUpstream, policy: TransparentPolicy = POLICY, **kwargs: Any
) -> Iterator[str]:
    fields = kwargs.pop("config", {})
    app = create_app(GatewayConfig(upstream=upstream.url, **fields), transparent=policy, **kwargs)
    with serving(app) as url:
        yield url


class Conversation:
    """A Claude Code-like tool loop: the client keeps its whole history and resends it,
    its one breakpoint on the last message, as Claude Code does."""

    def __init__(self, task: str, *, headers: dict[str, str] | None = None, size: int = 1_500):
        self.history: list[dict[str, Any]] = [{"role": "user", "content": task}]
        self.headers = headers or {}
        self.size = size
        self.turns = 0

    def step(self) -> None:
        """The model's recorded tool call and its result, appended."""
        i = self.turns
        self.turns += 1
        self.history.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Checking step {i}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:03d}",
                        "name": "bash",
                        "input": {"command": f"grep -rn item_{i} src/"},
                    },
                ],
            }
        )
        output = f"src/mod_{i}.py:{i}: item_{i} = compute({i})\n" * (self.size // 40)
        self.history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i:03d}", "content": output}
                ],
            }
        )

    def wire(self, *, marked: bool = True) -> list[dict[str, Any]]:
        """The history as sent: a breakpoint on the last block of the last message."""
        out = json.loads(json.dumps(self.history))
        last = out[-1]
        if marked and isinstance(last["content"], list):
            last["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return out

    def turn(self, url: str, *, pause: float = 0.0, **extra: Any) -> float:
        """One turn of the loop: the model's tool step, ``pause`` seconds of the client's
        own work (its tools, the model's answer), then the request through the gateway at
        ``url``; the seconds the request took."""
        self.step()
        time.sleep(pause)
        began = time.monotonic()
        self.send(url, **extra)
        return time.monotonic() - began

    def send(self, url: str, *, marked: bool = True, **extra: Any) -> Any:
        return client(url).beta.messages.create(
            model=MODEL,
            max_tokens=64,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
            if marked
            else SYSTEM,
            tools=TOOLS,  # type: ignore[arg-type]
            messages=self.wire(marked=marked),  # type: ignore[arg-type]
            extra_headers=self.headers,
            **extra,
        )


def plain(value: Any) -> Any:
    """``value`` without ``cache_control`` (not content: Anthropic's cache ignores it)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def dumped(messages: list[Any]) -> list[bytes]:
    return [json.dumps(plain(m), ensure_ascii=False).encode() for m in messages]


def prefix_kept(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether ``after`` starts with every byte ``before`` sent (markers aside)."""
    old, new = dumped(before["messages"]), dumped(after["messages"])
    return (
        json.dumps(before["tools"]) == json.dumps(after["tools"])
        and plain(before["system"]) == plain(after["system"])
        and new[: len(old)] == old
    )


def summary_text(body: dict[str, Any]) -> str | None:
    first = body["messages"][0]["content"]
    if isinstance(first, list) and first[0]["type"] == "text":
        text: str = first[0]["text"]
        if text.startswith("This conversation continues"):
            return text
    return None


def tokens(counter: AnthropicEstimator, body: dict[str, Any]) -> int:
    """The gateway counter's count of a whole request."""
    counts = CountCache()
    fixed = counts.fixed(counter, body.get("system"), body.get("tools"))
    return fixed + sum(counts.count(counter, m) for m in body["messages"])


def markers(body: dict[str, Any]) -> int:
    parts: list[Any] = [
        *body.get("tools", []),
        *(body["system"] if isinstance(body["system"], list) else []),
    ]
    for m in body["messages"]:
        if isinstance(m["content"], list):
            parts.extend(m["content"])
    return sum("cache_control" in p for p in parts)


def run(
    conversation: Conversation, url: str, upstream: ScriptedUpstream, turns: int, **kw: Any
) -> list[dict[str, Any]]:
    bodies = []
    for _ in range(turns):
        upstream.then_json(message("ok"))
        conversation.turn(url, **kw)
        bodies.append(upstream.received[-1].json())
    return bodies


def test_each_turn_forwards_the_previous_prefix_byte_for_byte_except_once_per_compaction(
    upstream: ScriptedUpstream,
) -> None:
    conversation = Conversation("Find every item and fix it.")
    with transparent_gateway(upstream) as url:
        bodies = run(
            conversation,
            url,
            upstream,
            30,
            betas=["context-management-2025-06-27"],
            context_management=CLAUDE_CODE_EDITS,
        )
    counter = AnthropicEstimator()
    changes = [i for i in range(1, len(bodies)) if not prefix_kept(bodies[i - 1], bodies[i])]
    summaries = [summary_text(b) for b in bodies]
    compactions = [i for i in range(1, len(bodies)) if summaries[i] != summaries[i - 1]]
    assert compactions, "the conversation passed the trigger: it must have been compacted"
    assert changes == compactions
    # Never on consecutive turns: after a compaction the request is back to `keep`.
    assert min(b - a for a, b in itertools.pairwise(compactions)) >= 3
    # The client's history kept growing; the forwarded request stays near the window.
    assert counter.count_text(json.dumps(conversation.history)) > POLICY.window
    for body in bodies:
        assert markers(body) <= 4
        assert body["messages"][0]["role"] == "user"
    # Each tool call keeps its result: the kept tail starts at an assistant message.
    for body in bodies:
        uses = {
            b["id"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        }
        results = {
            b["tool_use_id"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        }
        assert uses == results


def test_the_no_op_that_claude_code_sends_is_still_answered_as_anthropic_does(
    upstream: ScriptedUpstream,
) -> None:
    conversation = Conversation("Find every item.")
    conversation.step()
    upstream.then_json(message("ok"))
    with transparent_gateway(upstream) as url:
        answer = conversation.send(
            url, betas=["context-management-2025-06-27"], context_management=CLAUDE_CODE_EDITS
        )
    sent = upstream.received[-1].json()
    assert "context_management" not in sent  # emulated upstream: stripped
    assert answer.context_management is not None
    assert answer.context_management.applied_edits == []


def test_a_request_that_asks_for_edits_gets_exactly_them_and_no_transparent_compaction(
    upstream: ScriptedUpstream,
) -> None:
    conversation = Conversation("Find every item.")
    edits: Any = {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 100_000},
            }
        ]
    }
    with transparent_gateway(upstream) as url:
        bodies = run(
            conversation,
            url,
            upstream,
            16,
            betas=["context-management-2025-06-27"],
            context_management=edits,
        )
    assert all(summary_text(b) is None for b in bodies)
    assert plain(bodies[-1]["messages"]) == plain(conversation.history)


def test_two_sessions_side_by_side_keep_apart(upstream: ScriptedUpstream) -> None:
    # Claude Code's subagents share the session id; their first messages differ.
    big = Conversation("Refactor the parser.", headers={"x-claude-code-session-id": "s-1"})
    small = Conversation(
        "Explore: list the tests.", headers={"x-claude-code-session-id": "s-1"}, size=200
    )
    bodies: dict[str, list[dict[str, Any]]] = {"big": [], "small": []}
    with transparent_gateway(upstream) as url:
        for _ in range(24):
            for name, conversation in (("big", big), ("small", small)):
                bodies[name] += run(conversation, url, upstream, 1)
    assert any(summary_text(b) for b in bodies["big"])
    # The small one never passed its trigger: forwarded as sent, its prefix kept every turn.
    assert all(summary_text(b) is None for b in bodies["small"])
    assert plain(bodies["small"][-1]["messages"]) == plain(small.history)
    for name in bodies:
        seq = bodies[name]
        summaries = [summary_text(b) for b in seq]
        changes = [i for i in range(1, len(seq)) if not prefix_kept(seq[i - 1], seq[i])]
        assert changes == [i for i in range(1, len(seq)) if summaries[i] != summaries[i - 1]]


def test_session_identity_headers_then_a_hash_that_keeps_subagents_apart() -> None:
    a = {"system": "s", "messages": [{"role": "user", "content": "task A"}]}
    b = {"system": "s", "messages": [{"role": "user", "content": "task B"}]}
    assert session_key({"x-contextfold-session": "mine"}, a) == session_key(
        {"x-contextfold-session": "mine"}, b
    )
    cc = {"x-claude-code-session-id": "s-1"}
    assert session_key(cc, a) != session_key(cc, b)
    agent = {**cc, "x-claude-code-agent-id": "agent-7"}
    assert session_key(agent, a) == session_key(agent, b)
    assert session_key({}, a) != session_key({}, b)
    marked = {
        "system": "s",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "task A", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
    }
    unmarked = {
        "system": "s",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "task A"}]}],
    }
    assert session_key({}, marked) == session_key({}, unmarked)


def test_a_restart_in_the_middle_forwards_what_an_unrestarted_gateway_would_from_sqlite(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    def conversation() -> Conversation:
        return Conversation("Find every item and fix it.", headers={"x-contextfold-session": "r1"})

    with transparent_gateway(upstream) as url:
        reference = run(conversation(), url, upstream, 17)
    assert summary_text(reference[15]) is not None  # compacted before the restart

    restarted = conversation()
    path = tmp_path / "gateway.sqlite"
    with transparent_gateway(upstream, sessions=SQLiteWorkspace(path)) as url:
        before = run(restarted, url, upstream, 16)
    with transparent_gateway(upstream, sessions=SQLiteWorkspace(path)) as url:
        after = run(restarted, url, upstream, 1)
    assert [plain(b) for b in [*before, *after]] == [plain(b) for b in reference]

    # Without the stored state, the restarted gateway forwards something else.
    forgetful = conversation()
    with transparent_gateway(upstream) as url:
        run(forgetful, url, upstream, 16)
    with transparent_gateway(upstream) as url:
        lost = run(forgetful, url, upstream, 1)
    assert plain(lost[0]) != plain(reference[16])


def test_breakpoints_are_placed_when_the_client_placed_none(upstream: ScriptedUpstream) -> None:
    conversation = Conversation("Find every item.")
    with transparent_gateway(upstream, TransparentPolicy(window=1_000_000)) as url:
        bodies = run(conversation, url, upstream, 3, marked=False)
    first = bodies[0]
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" in first["messages"][-1]["content"][-1]
    # Turn 2 on: the end of what was forwarded before is marked too, so it is read back
    # however many blocks the turn adds.
    second = bodies[1]
    previous_end = len(bodies[0]["messages"]) - 1
    assert "cache_control" in second["messages"][previous_end]["content"][-1]
    assert markers(second) == 3


def test_the_clients_breakpoints_are_kept_and_never_more_than_four(
    upstream: ScriptedUpstream,
) -> None:
    conversation = Conversation("Find every item.")
    conversation.step()
    history = conversation.wire()
    for m in history[1:]:
        m["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    upstream.then_json(message("ok"))
    with transparent_gateway(upstream, TransparentPolicy(window=1_000_000)) as url:
        client(url).messages.create(
            model=MODEL,
            max_tokens=8,
            messages=history,  # type: ignore[arg-type]
            system=[
                {
                    "type": "text",
                    "text": SYSTEM,
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
                {
                    "type": "text",
                    "text": "More.",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
            ],
        )
    sent = upstream.received[-1].json()
    assert markers(sent) == 4
    assert sent["messages"] == history


def test_count_tokens_counts_what_is_forwarded(upstream: ScriptedUpstream) -> None:
    conversation = Conversation(
        "Find every item and fix it.", headers={"x-contextfold-session": "c1"}
    )
    with transparent_gateway(upstream) as url:
        bodies = run(conversation, url, upstream, 16)
        assert summary_text(bodies[-1]) is not None
        counted = client(url).messages.count_tokens(
            model=MODEL,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            tools=TOOLS,
            messages=conversation.wire(),
            extra_headers=conversation.headers,  # type: ignore[arg-type]
        )
    counter = AnthropicEstimator()
    assert counted.input_tokens == tokens(counter, plain(bodies[-1]))
    assert counted.input_tokens < tokens(
        counter, {"system": SYSTEM, "tools": TOOLS, "messages": conversation.history}
    )


def test_oversized_tool_results_are_cut_the_same_way_every_turn(upstream: ScriptedUpstream) -> None:
    conversation = Conversation("Read the log.", size=40_000)
    policy = TransparentPolicy(window=1_000_000, tool_result_limit=500)
    with transparent_gateway(upstream, policy) as url:
        bodies = run(conversation, url, upstream, 3)
    counter = AnthropicEstimator()
    result = bodies[0]["messages"][2]["content"][0]["content"]
    assert "tokens of this tool result omitted by the gateway" in result
    assert counter.count_text(result) <= 520
    assert result.startswith(conversation.history[2]["content"][0]["content"][:200])
    assert all(prefix_kept(a, b) for a, b in itertools.pairwise(bodies))


def test_a_streamed_answer_is_relayed_event_by_event(upstream: ScriptedUpstream) -> None:
    conversation = Conversation("Find every item.")
    conversation.step()
    upstream.then_sse(message_stream("Hello there"))
    with (
        transparent_gateway(upstream) as url,
        client(url).messages.stream(
            model=MODEL,
            max_tokens=8,
            messages=conversation.wire(),  # type: ignore[arg-type]
        ) as stream,
    ):
        text = "".join(stream.text_stream)
    assert text == "Hello there"


def test_a_first_party_upstream_gets_the_field_and_the_transparent_body(
    upstream: ScriptedUpstream,
) -> None:
    conversation = Conversation("Find every item and fix it.")
    config = {"pass_through_context_management": True}
    with transparent_gateway(upstream, config=config) as url:
        bodies = run(
            conversation,
            url,
            upstream,
            16,
            betas=["context-management-2025-06-27"],
            context_management=CLAUDE_CODE_EDITS,
        )
    assert bodies[-1]["context_management"] == CLAUDE_CODE_EDITS
    assert summary_text(bodies[-1]) is not None


def test_policy_values_are_checked() -> None:
    with pytest.raises(ValueError, match="keep"):
        TransparentPolicy(trigger=0.5, keep=0.6)
    with pytest.raises(ValueError, match="window"):
        TransparentPolicy(window=0)
    with pytest.raises(ValueError, match="not available"):
        create_app(
            GatewayConfig(upstream="http://127.0.0.1:1"),
            transparent={"/v1/embeddings": POLICY},
        )


def test_no_turn_costs_more_through_the_gateway_under_anthropics_cache_rules(
    upstream: ScriptedUpstream,
) -> None:
    from contextfold.replay import anthropic_blocks, cache_model, load_prices

    conversation = Conversation("Find every item and fix it.")
    sent, forwarded = [], []
    with transparent_gateway(upstream, TransparentPolicy(window=20_000)) as url:
        for _ in range(40):
            conversation.step()
            upstream.then_json(message("ok"))
            conversation.send(url)
            forwarded.append(upstream.received[-1].json())
            sent.append(
                {"system": forwarded[-1]["system"], "tools": TOOLS, "messages": conversation.wire()}
            )
    assert any(summary_text(b) for b in forwarded)
    rates = load_prices()["anthropic"]
    counter = AnthropicEstimator()

    def costs(bodies: list[dict[str, Any]]) -> list[float]:
        model = cache_model("anthropic", rates)
        out = []
        for i, body in enumerate(bodies):
            u = model.request(anthropic_blocks(body, counter), at=10.0 * i)
            out.append(
                u.uncached * rates["input"]
                + u.write * rates["cache_write"]
                + u.read * rates["cache_read"]
            )
        return out

    direct, gateway = costs(sent), costs(forwarded)
    assert all(g <= d * 1.0001 for g, d in zip(gateway, direct, strict=True))
    assert sum(gateway) < sum(direct)


def test_serve_refuses_a_bad_policy() -> None:
    from typer.testing import CliRunner

    from contextfold.cli import app

    args = ["serve", "--upstream", "http://127.0.0.1:9", "--window", "8000", "--keep", "0.9"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "keep must be in (0, trigger)" in result.output


def test_serve_with_a_window_and_a_state_file_compacts_and_keeps_state(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    import subprocess
    import sys
    import time

    import httpx

    from .servers import free_port

    port, state = free_port(), tmp_path / "state.sqlite"
    command = [sys.executable, "-m", "contextfold.cli", "serve", "--upstream", upstream.url]
    options = ["--port", str(port), "--window", "8000", "--state", str(state)]
    proc = subprocess.Popen([*command, *options], stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/health")
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.2)
        bodies = run(Conversation("Find every item and fix it."), url, upstream, 12)
    finally:
        proc.terminate()
        proc.wait(10)
    assert summary_text(bodies[-1]) is not None
    opening = {
        "system": [{"type": "text", "text": SYSTEM}],
        "messages": [{"role": "user", "content": "Find every item and fix it."}],
    }

    async def saved() -> str | None:
        workspace = SQLiteWorkspace(state)
        await workspace.initialize()
        return await workspace.load_state("gateway-transparent/" + session_key({}, opening))

    text = asyncio.run(saved())
    assert text is not None
    assert SessionState.from_json(text).compactions >= 1


def test_a_turn_of_more_than_20_blocks_still_reads_the_previous_prefix(
    upstream: ScriptedUpstream,
) -> None:
    """Anthropic looks for a cached entry at most 20 blocks before a breakpoint: a turn of
    12 parallel tool calls (25 blocks) puts the client's one message breakpoint out of
    reach of the previous entry; the gateway's breakpoint at the previous end is on it."""
    from contextfold.replay import anthropic_blocks, cache_model, load_prices

    history: list[dict[str, Any]] = [{"role": "user", "content": "Check every module."}]
    sent, forwarded = [], []
    with transparent_gateway(upstream, TransparentPolicy(window=1_000_000)) as url:
        for turn in range(4):
            ids = [f"toolu_{turn}_{k}" for k in range(12)]
            history.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Batch {turn}."},
                        *(
                            {"type": "tool_use", "id": i, "name": "bash", "input": {"command": i}}
                            for i in ids
                        ),
                    ],
                }
            )
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": i, "content": f"{i}: ok\n" * 60}
                        for i in ids
                    ],
                }
            )
            wire = json.loads(json.dumps(history))
            wire[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
            body = {
                "system": [
                    {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
                ],
                "tools": TOOLS,
                "messages": wire,
            }
            upstream.then_json(message("ok"))
            client(url).messages.create(model=MODEL, max_tokens=8, **body)  # type: ignore[arg-type]
            sent.append(body)
            forwarded.append(upstream.received[-1].json())
    rates = load_prices()["anthropic"]
    counter = AnthropicEstimator()

    def reads(bodies: list[dict[str, Any]]) -> int:
        model = cache_model("anthropic", rates)
        return sum(
            model.request(anthropic_blocks(b, counter), at=float(i)).read
            for i, b in enumerate(bodies)
        )

    assert reads(sent) == 0  # the client's breakpoint never reaches the previous entry
    assert reads(forwarded) > 0
    for a, b in itertools.pairwise(forwarded):
        assert prefix_kept(a, b)


def test_a_side_request_under_the_same_session_does_not_reset_the_compaction(
    upstream: ScriptedUpstream,
) -> None:
    def conversation() -> Conversation:
        return Conversation("Find every item and fix it.", headers={"x-contextfold-session": "s"})

    with transparent_gateway(upstream) as url:
        reference = run(conversation(), url, upstream, 13)
    assert summary_text(reference[11]) is not None
    main = conversation()
    with transparent_gateway(upstream) as url:
        before = run(main, url, upstream, 12)
        probe = conversation()
        probe.step()
        upstream.then_json(message("ok"))
        probe.send(url)
        assert plain(upstream.received[-1].json()["messages"]) == plain(probe.history)
        after = run(main, url, upstream, 1)
    assert [plain(b) for b in [*before, *after]] == [plain(b) for b in reference]


def test_a_compacted_streamed_turn_keeps_the_event_order_and_is_counted(
    upstream: ScriptedUpstream,
) -> None:
    import httpx

    conversation = Conversation("Find every item and fix it.")
    with transparent_gateway(upstream) as url:
        run(conversation, url, upstream, 11)
        conversation.step()
        upstream.then_sse(message_stream("Hello there"))
        with client(url).beta.messages.stream(
            model=MODEL,
            max_tokens=8,
            system=SYSTEM,
            tools=TOOLS,  # type: ignore[arg-type]
            messages=conversation.wire(),  # type: ignore[arg-type]
            betas=["context-management-2025-06-27"],
            context_management=CLAUDE_CODE_EDITS,
        ) as stream:
            events = [event.type for event in stream]
            final = stream.get_final_message()
        metrics = httpx.get(f"{url}/metrics").text
    assert summary_text(upstream.received[-1].json()) is not None
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert final.content[0].type == "text"
    assert final.content[0].text == "Hello there"
    assert final.context_management is not None
    assert final.context_management.applied_edits == []
    compactions = [
        line
        for line in metrics.splitlines()
        if line.startswith("contextfold_gateway_compactions_total")
    ]
    assert compactions
    assert float(compactions[0].split()[-1]) >= 1


@pytest.mark.parametrize("fail_closed", [False, True])
def test_a_transparent_failure_fails_open_or_closed_as_configured(
    upstream: ScriptedUpstream, fail_closed: bool
) -> None:
    from contextfold.token import AnthropicEstimator

    class Broken(AnthropicEstimator):
        def count_message(self, msg: Any) -> int:
            raise RuntimeError("counter down")

    conversation = Conversation("Fix the build.")
    conversation.step()
    config = {"fail_closed": fail_closed}
    with transparent_gateway(upstream, config=config, counter=Broken()) as url:
        if fail_closed:
            with pytest.raises(anthropic.InternalServerError):
                conversation.send(url)
            assert upstream.received == []
        else:
            upstream.then_json(message("ok"))
            conversation.send(url)
            assert plain(upstream.received[0].json()["messages"]) == plain(conversation.history)
