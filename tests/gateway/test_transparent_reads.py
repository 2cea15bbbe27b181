"""Offload and read-back on ``/v1/messages`` in transparent mode, with the ``anthropic`` SDK
as the client and a scripted model that calls the gateway's read-back tool: the calls
never reach the client (whole or streamed), the stream keeps Anthropic's event grammar,
usage is the sum of every upstream call, the forwarded prefix stays byte for byte,
sessions never read each other's items, and a restarted gateway reads what it offloaded
before from its SQLite state."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from contextfold.gateway import READ_TOOL, CountCache, ResultStore, TransparentPolicy
from contextfold.gateway._transparent import ITEMS_HEADING
from contextfold.token import AnthropicEstimator
from contextfold.workspace import SQLiteWorkspace

from .conftest import SECRET
from .reader import NOTE, answer_of, decide, result_text, then_answer, then_reader
from .reads_client import (
    POLICY,
    Agent,
    check_grammar,
    events,
    leaks,
    post_stream,
    sdk_stream,
    stream_body,
)
from .servers import ScriptedUpstream, free_port, message
from .test_transparent import (
    CLAUDE_CODE_EDITS,
    MODEL,
    SYSTEM,
    TOOLS,
    plain,
    transparent_gateway,
)


def test_a_read_back_call_is_answered_by_the_gateway_and_never_reaches_the_client(
    upstream: ScriptedUpstream,
) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-A")
    agent.long_step()
    then_reader(upstream, 2)
    with transparent_gateway(upstream, POLICY) as url:
        reply = agent.send(url)
    assert [b.type for b in reply.content] == ["text", "text"]
    assert reply.content[1].text == "Found: NEEDLE-A-0 is defined in src/config.py:42"
    assert reply.stop_reason == "end_turn"
    assert not leaks(reply.model_dump_json())
    # Usage: both upstream calls (10 input and 2 output tokens each).
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (20, 4)
    first, second = (r.json() for r in upstream.received)
    # The cut result names the item; the needle is not in what was forwarded.
    forwarded = json.dumps(first["messages"])
    assert "NEEDLE-A" not in forwarded
    assert "item r" in forwarded
    # The client's tools first, unchanged; the read-back tool last; the same on both rounds.
    assert plain(first["tools"][:-1]) == TOOLS
    assert first["tools"][-1]["name"] == READ_TOOL
    assert first["tools"] == second["tools"]
    assert first["system"] == second["system"]
    # Round two continues round one byte for byte, then the call and its result.
    old = [json.dumps(plain(m)) for m in first["messages"]]
    assert [json.dumps(plain(m)) for m in second["messages"][: len(old)]] == old
    call, result = second["messages"][len(old) :]
    assert call["content"][-1]["name"] == READ_TOOL
    assert "NEEDLE-A-0" in result["content"][0]["content"]


def test_a_streamed_read_back_is_one_stream_in_anthropics_grammar(
    upstream: ScriptedUpstream,
) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-S")
    agent.long_step()
    then_reader(upstream, 2)
    with transparent_gateway(upstream, POLICY) as url:
        raw = post_stream(url, agent)
        then_reader(upstream, 2)
        text, final = sdk_stream(url, agent)
    assert not leaks(raw)
    stream_events = events(raw)
    check_grammar(stream_events)
    assert text == "Reading the rest.Found: NEEDLE-S-0 is defined in src/config.py:42"
    assert [b.type for b in final.content] == ["text", "text"]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (20, 4)
    assert len(upstream.received) == 4


def ask(url: str, agent: Agent, *, stream: bool) -> Any:
    """One request from the SDK, streamed (the final message accumulated) or not."""
    return sdk_stream(url, agent)[1] if stream else agent.send(url)


@pytest.mark.parametrize("stream", [False, True])
def test_beside_client_calls_the_gateway_answers_its_own_and_asks_again(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    """The model calls bash and the read-back tool together: the client never sees the
    first answer's bash call (its sibling is hidden); the model is asked again with the
    read-back result, and its next answer reaches the client."""
    agent = Agent("Where is the needle defined?", "NEEDLE-M")
    agent.long_step()
    bash = {"type": "tool_use", "id": "toolu_bash_1", "name": "bash", "input": {"command": "ls"}}
    then_reader(upstream, 1, also=[bash])
    again = {"type": "tool_use", "id": "toolu_bash_2", "name": "bash", "input": {"command": "ls"}}
    then_answer(upstream, message("", content=[again], stop_reason="tool_use"))
    with transparent_gateway(upstream, POLICY) as url:
        reply = ask(url, agent, stream=stream)
    assert [(b.type, getattr(b, "id", None)) for b in reply.content] == [
        ("text", None),
        ("tool_use", "toolu_bash_2"),
    ]
    assert reply.stop_reason == "tool_use"
    assert not leaks(reply.model_dump_json())
    asked = upstream.received[1].json()["messages"]
    # The re-asked round holds the read-back call only: no client call without a result.
    assert [b.get("name") for b in asked[-2]["content"] if b["type"] == "tool_use"] == [READ_TOOL]


@pytest.mark.parametrize("stream", [False, True])
def test_the_rounds_are_bounded_and_a_last_call_is_removed(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    """A model that keeps calling the read-back tool: after ``read_rounds`` extra calls the
    client gets the text, without the call, and ``end_turn``."""
    agent = Agent("Where is the needle defined?", "NEEDLE-B")
    agent.long_step()
    policy = TransparentPolicy(window=1_000_000, tool_result_limit=400, read_rounds=2)

    def stubborn(_request: Any, got: Any) -> Any:
        body = got.json()
        note = NOTE.search(result_text(body["messages"][2]["content"][0]))
        assert note is not None
        n = len(body["messages"])
        call = {
            "type": "tool_use",
            "id": f"toolu_read_{n}",
            "name": READ_TOOL,
            "input": {"id": note.group(1)},
        }
        answer = message(
            "", content=[{"type": "text", "text": f"again {n}."}, call], stop_reason="tool_use"
        )
        return answer_of(answer, bool(body.get("stream")))

    for _ in range(3):
        upstream.then(stubborn)
    with transparent_gateway(upstream, policy) as url:
        reply = ask(url, agent, stream=stream)
    assert len(upstream.received) == 3
    assert [b.type for b in reply.content] == ["text", "text", "text"]
    assert reply.stop_reason == "end_turn"
    assert not leaks(reply.model_dump_json())
    assert reply.usage.input_tokens == 30
    # Each read got the page from the item's start: the gateway answered it.
    last = upstream.received[-1].json()["messages"][-1]["content"][0]
    assert result_text(last).startswith("[item r")


def test_turn_after_turn_the_prefix_is_forwarded_byte_for_byte(upstream: ScriptedUpstream) -> None:
    """Several turns, each with a read-back: every request the upstream receives starts
    with every byte of the previous turn's first request (markers aside)."""
    agent = Agent("Find every needle.", "NEEDLE-T")
    firsts: list[dict[str, Any]] = []
    with transparent_gateway(upstream, POLICY) as url:
        for _ in range(4):
            agent.long_step()
            then_reader(upstream, 2)
            before = len(upstream.received)
            reply = agent.send(url)
            firsts.append(upstream.received[before].json())
            assert reply.content[-1].text.startswith(f"Found: NEEDLE-T-{agent.turns - 1}")
            agent.answered(reply)
    for a, b in itertools.pairwise(firsts):
        assert json.dumps(a["tools"]) == json.dumps(b["tools"])
        old = [json.dumps(plain(m)) for m in a["messages"]]
        assert [json.dumps(plain(m)) for m in b["messages"][: len(old)]] == old


def test_count_tokens_counts_the_read_back_tool(upstream: ScriptedUpstream) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-C")
    agent.long_step()
    then_reader(upstream, 2)
    with transparent_gateway(upstream, POLICY) as url:
        sdk = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
        counted = sdk.messages.count_tokens(
            model=MODEL,
            system=SYSTEM,
            tools=TOOLS,
            messages=agent.wire(),  # type: ignore[arg-type]
        )
        agent.send(url, marked=False)
    sent = plain(upstream.received[0].json())
    assert sent["tools"][-1]["name"] == READ_TOOL
    counter = AnthropicEstimator()
    counts = CountCache()
    total = counts.fixed(counter, sent["system"], sent["tools"]) + sum(
        counts.count(counter, m) for m in sent["messages"]
    )
    without = counts.fixed(counter, sent["system"], sent["tools"][:-1]) + sum(
        counts.count(counter, m) for m in sent["messages"]
    )
    assert counted.input_tokens == total > without


def test_two_sessions_side_by_side_never_read_each_others_items(upstream: ScriptedUpstream) -> None:
    a = Agent("Where is A's needle?", "NEEDLE-A", headers={"x-contextfold-session": "a"})
    b = Agent("Where is B's needle?", "NEEDLE-B", headers={"x-contextfold-session": "b"})
    a.long_step()
    b.long_step()
    with transparent_gateway(upstream, POLICY) as url:
        then_reader(upstream, 2)
        a.send(url)
        item_a = upstream.received[-1].json()["messages"][-2]["content"][-1]["input"]["id"]
        # B's model asks for A's item: the gateway looks it up in B's workspace only.
        call = {
            "type": "tool_use",
            "id": "toolu_read_x",
            "name": READ_TOOL,
            "input": {"id": item_a},
        }
        upstream.then_json(message("", content=[call], stop_reason="tool_use"))
        upstream.then_json(message("B is done."))
        reply = b.send(url)
    answer = upstream.received[-1].json()["messages"][-1]["content"][0]
    assert answer["is_error"] is True
    assert answer["content"] == f"no item {item_a} in this conversation"
    assert "NEEDLE-A" not in json.dumps(upstream.received[-1].json())
    assert reply.content[-1].text == "B is done."


def test_a_restarted_gateway_reads_back_what_it_offloaded_before_from_sqlite(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    path = tmp_path / "gateway.sqlite"
    agent = Agent(
        "Where is the needle defined?", "NEEDLE-R", headers={"x-contextfold-session": "r"}
    )
    agent.long_step()
    upstream.then_json(message("I will look later."))
    with transparent_gateway(upstream, POLICY, sessions=SQLiteWorkspace(path)) as url:
        agent.answered(agent.send(url))
    before = upstream.received[-1].json()
    # A new gateway process on the same state file: the next turn reads the item back.
    agent.history.append({"role": "user", "content": [{"type": "text", "text": "Look now."}]})
    item = NOTE.search(result_text(before["messages"][2]["content"][0]))
    assert item is not None
    call = {
        "type": "tool_use",
        "id": "toolu_read_1",
        "name": READ_TOOL,
        "input": {"id": item.group(1), "offset": int(item.group(2))},
    }
    upstream.then_json(message("", content=[call], stop_reason="tool_use"))
    upstream.then_json(message("Found it."))
    with transparent_gateway(upstream, POLICY, sessions=SQLiteWorkspace(path)) as url:
        reply = agent.send(url)
    after = upstream.received[-2].json()
    old = [json.dumps(plain(m)) for m in before["messages"]]
    assert [json.dumps(plain(m)) for m in after["messages"][: len(old)]] == old
    read = upstream.received[-1].json()["messages"][-1]["content"][0]
    assert "is_error" not in read
    assert "NEEDLE-R-0" in read["content"]
    assert reply.content[-1].text == "Found it."
    # The item is in the state file, under the conversation's own workspace session.
    store = SQLiteWorkspace(path)
    asyncio.run(store.initialize())
    items = asyncio.run(store.list_items(ResultStore.session_of("h:r")))
    assert [i.ref.rsplit("/", 1)[-1] for i in items] == [f"tool_result-{item.group(1)}.txt"]


def test_a_client_tool_with_the_read_back_tools_name_fails_open(upstream: ScriptedUpstream) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-F")
    agent.long_step()
    upstream.then_json(message("ok"))
    clash = [*TOOLS, {"name": READ_TOOL, "description": "mine", "input_schema": {"type": "object"}}]
    with transparent_gateway(upstream, POLICY) as url:
        anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0).messages.create(
            model=MODEL,
            max_tokens=8,
            system=SYSTEM,
            tools=clash,
            messages=agent.wire(),  # type: ignore[arg-type]
        )
        metrics = httpx.get(f"{url}/metrics").text
    sent = upstream.received[-1].json()
    assert [t["name"] for t in sent["tools"]] == ["bash", READ_TOOL]
    assert "NEEDLE-F" in json.dumps(sent["messages"])  # forwarded unchanged
    assert "contextfold_gateway_untransformed_total 1" in metrics


@contextmanager
def served(upstream: ScriptedUpstream, state: Path) -> Iterator[str]:
    """``contextfold serve`` as users run it, in a process of its own."""
    port = free_port()
    command = [sys.executable, "-m", "contextfold.cli", "serve", "--upstream", upstream.url]
    options = ["--port", str(port), "--window", "1000000", "--tool-result-limit", "400"]
    proc = subprocess.Popen([*command, *options, "--state", str(state)], stderr=subprocess.PIPE)
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
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_offloads_reads_back_streamed_and_after_a_restart(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The command line with a state file: two conversations side by side read their own
    items back while streaming; the gateway is restarted; the next turn of one of them
    reads back an item it offloaded before the restart, and the other still cannot."""
    state = tmp_path / "gateway.sqlite"
    a = Agent("Where is A's needle?", "NEEDLE-A", headers={"x-contextfold-session": "a"})
    b = Agent("Where is B's needle?", "NEEDLE-B", headers={"x-contextfold-session": "b"})
    with served(upstream, state) as url:
        for agent in (a, b):
            agent.long_step()
            then_reader(upstream, 2)
            reply = ask(url, agent, stream=True)
            assert (
                reply.content[-1].text == f"Found: {agent.needle}-0 is defined in src/config.py:42"
            )
            assert not leaks(reply.model_dump_json())
            agent.answered(reply)
    first_of_a = upstream.received[0].json()
    note = NOTE.search(result_text(first_of_a["messages"][2]["content"][0]))
    assert note is not None
    call = {
        "type": "tool_use",
        "id": "toolu_read_9",
        "name": READ_TOOL,
        "input": {"id": note.group(1), "offset": int(note.group(2))},
    }
    with served(upstream, state) as url:
        for agent, expected in ((a, False), (b, True)):
            agent.history.append({"role": "user", "content": [{"type": "text", "text": "Again."}]})
            before = len(upstream.received)
            then_answer(upstream, message("", content=[call], stop_reason="tool_use"))
            then_answer(upstream, message("Done."))
            reply = ask(url, agent, stream=True)
            assert reply.content[-1].text == "Done."
            read = upstream.received[-1].json()["messages"][-1]["content"][0]
            assert read.get("is_error", False) is expected
            assert ("NEEDLE-A-0" in result_text(read)) is not expected
            # The restarted gateway forwards the previous prefix byte for byte.
            sent = upstream.received[before].json()
            earlier = [r.json() for r in upstream.received[:before]]
            mine = next(e for e in earlier if e["messages"][0] == sent["messages"][0])
            old = [json.dumps(plain(m)) for m in mine["messages"]]
            assert [json.dumps(plain(m)) for m in sent["messages"][: len(old)]] == old


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_no_op_edit_is_still_reported_after_a_read_back(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-N")
    agent.long_step()
    then_reader(upstream, 2)
    extra: Any = {
        "betas": ["context-management-2025-06-27"],
        "context_management": CLAUDE_CODE_EDITS,
    }
    with transparent_gateway(upstream, POLICY) as url:
        if stream:
            sdk = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
            with sdk.beta.messages.stream(
                model=MODEL,
                max_tokens=64,
                system=SYSTEM,
                tools=TOOLS,  # type: ignore[arg-type]
                messages=agent.wire(),  # type: ignore[arg-type]
                **extra,
            ) as s:
                reply = s.get_final_message()
        else:
            reply = agent.send(url, **extra)
    assert reply.content[-1].text == "Found: NEEDLE-N-0 is defined in src/config.py:42"  # type: ignore[union-attr]
    assert reply.context_management is not None
    assert reply.context_management.applied_edits == []
    assert not leaks(reply.model_dump_json())
    assert len(upstream.received) == 2
    assert all("context_management" not in r.json() for r in upstream.received)


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_on_a_read_back_round_reaches_the_client(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    """Whole: the later round's error status and body as the upstream sent them.
    Streamed (the headers are gone): an ``error`` event ends the stream, as Anthropic's
    own mid-stream errors do."""
    agent = Agent("Where is the needle defined?", "NEEDLE-E")
    agent.long_step()
    then_reader(upstream, 1)
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    upstream.then_json(overloaded, status=529)
    with transparent_gateway(upstream, POLICY) as url:
        if stream:
            with pytest.raises(anthropic.APIStatusError, match="upstream failed"):
                ask(url, agent, stream=True)
        else:
            with pytest.raises(anthropic.APIStatusError) as caught:
                ask(url, agent, stream=False)
            assert caught.value.status_code == 529
            assert caught.value.body == overloaded
    assert len(upstream.received) == 2


def test_results_a_compaction_summarized_stay_readable(upstream: ScriptedUpstream) -> None:
    """The summary ends with the items offloaded from the messages it replaced: the model
    can still read a result back after its message left the request."""
    agent = Agent("Find every needle.", "NEEDLE-K")
    policy = TransparentPolicy(window=8_000, tool_result_limit=400)
    with transparent_gateway(upstream, policy) as url:
        for _ in range(30):
            agent.long_step()
            upstream.then_json(message("ok"))
            agent.send(url)
            first = upstream.received[-1].json()["messages"][0]["content"]
            if isinstance(first, list) and ITEMS_HEADING in first[0]["text"]:
                break
        summary = first[0]["text"]
        listed = re.findall(r"^- item (r[0-9a-f]{16}): ", summary, re.MULTILINE)
        assert listed, "the conversation was compacted with offloaded results"
        # The first result is no longer in the request; its item is read back whole.
        assert "NEEDLE-K-0" not in json.dumps(upstream.received[-1].json())
        call = {
            "type": "tool_use",
            "id": "toolu_read_k",
            "name": READ_TOOL,
            "input": {"id": listed[0]},
        }
        agent.history.append({"role": "user", "content": [{"type": "text", "text": "And 0?"}]})
        upstream.then_json(message("", content=[call], stop_reason="tool_use"))
        upstream.then_json(message("There."))
        reply = agent.send(url)
    read = upstream.received[-1].json()["messages"][-1]["content"][0]
    assert "is_error" not in read
    assert result_text(read).startswith(f"[item {listed[0]}, characters 0 to ")
    assert reply.content[-1].text == "There."


def test_a_streamed_round_with_thinking_is_sent_back_with_its_signature(
    upstream: ScriptedUpstream,
) -> None:
    """Extended thinking: the round that called the tool goes back upstream with its
    thinking block whole (text and signature, rebuilt from the deltas), and the client
    gets the thinking as it was streamed."""
    agent = Agent("Where is the needle defined?", "NEEDLE-H")
    agent.long_step()
    thinking = {"type": "thinking", "thinking": "The needle was cut out.", "signature": "c2lnbmVk"}

    def thoughtful(_request: Any, got: Any) -> Any:
        answer = decide(got.json())
        answer["content"] = [thinking, *answer["content"]]
        return answer_of(answer, True)

    upstream.then(thoughtful)
    then_reader(upstream, 1)
    with transparent_gateway(upstream, POLICY) as url:
        reply = ask(url, agent, stream=True)
    assert [b.type for b in reply.content] == ["thinking", "text", "text"]
    assert reply.content[0].thinking == thinking["thinking"]  # type: ignore[union-attr]
    assert reply.content[0].signature == thinking["signature"]  # type: ignore[union-attr]
    assert reply.content[-1].text == "Found: NEEDLE-H-0 is defined in src/config.py:42"  # type: ignore[union-attr]
    sent_back = upstream.received[1].json()["messages"][-2]
    assert sent_back["content"][0] == thinking
    assert [b["type"] for b in sent_back["content"]] == ["thinking", "text", "tool_use"]


def test_a_client_that_leaves_during_a_read_back_round_cancels_it(
    upstream: ScriptedUpstream,
) -> None:
    """The second round's stream goes quiet after each event; the client leaves after the
    first bytes of it: the gateway hangs up on that round at once."""
    from .servers import message_stream

    agent = Agent("Where is the needle defined?", "NEEDLE-D")
    agent.long_step()
    then_reader(upstream, 1)
    upstream.then_slow_stream(message_stream("x" * 40), gap=5)
    body = stream_body(agent)
    with transparent_gateway(upstream, POLICY) as url:
        headers = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
        with httpx.stream(
            "POST", f"{url}/v1/messages", json=body, headers=headers, timeout=30
        ) as got:
            seen = b""
            for chunk in got.iter_bytes():
                seen += chunk
                if b'"index":1' in seen:  # the second round's first block
                    break
        assert upstream.disconnected.wait(3), "the read-back round kept running"
    assert len(upstream.received) == 2
