"""``compact_20260112`` emulated: the summary replaces the history upstream, the client
gets the documented compaction block, ``usage.iterations`` and stream events, and sends
the block back to continue."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
from anthropic.types.beta import BetaCompactionBlock

from contextfold.gateway import SUMMARY_PREFIX, apply_blocks
from contextfold.token import AnthropicEstimator

from .conftest import SECRET
from .history import tool_history
from .servers import ScriptedUpstream, message, message_stream
from .test_gateway_messages import check_anthropic_event_order, events_of

MODEL = "claude-test"
BETA = "compact-2026-01-12"


def compact(trigger: int = 1_000, **knobs: Any) -> Any:
    edit = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger}}
    return {"edits": [{**edit, **knobs}]}


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)


def test_the_history_before_the_last_block_is_replaced_by_its_summary() -> None:
    history = [
        {"role": "user", "content": "old question"},
        {
            "role": "assistant",
            "content": [
                {"type": "compaction", "content": "S1", "encrypted_content": None},
                {"type": "text", "text": "A1"},
            ],
        },
        {"role": "user", "content": "Q2"},
        {
            "role": "assistant",
            "content": [{"type": "compaction", "content": "S2"}, {"type": "text", "text": "A2"}],
        },
        {"role": "user", "content": "Q3"},
    ]
    assert apply_blocks(history) == [
        {"role": "user", "content": [{"type": "text", "text": SUMMARY_PREFIX + "S2"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A2"}]},
        {"role": "user", "content": "Q3"},
    ]


def test_a_block_without_content_is_a_no_op() -> None:
    history = [
        {"role": "user", "content": "Q1"},
        {
            "role": "assistant",
            "content": [{"type": "compaction", "content": None}, {"type": "text", "text": "A1"}],
        },
        {"role": "user", "content": "Q2"},
    ]
    assert apply_blocks(history) == [
        history[0],
        {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
        history[2],
    ]


def test_a_compaction_sends_the_summary_and_the_newest_turn_and_returns_the_block(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    history = tool_history(6)
    upstream.then_json(message("Linted."))
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,
        context_management=compact(),
        betas=[BETA],  # type: ignore[arg-type]
    )
    sent = upstream.received[0].json()
    assert "context_management" not in sent
    assert "anthropic-beta" not in upstream.received[0].headers
    (only,) = sent["messages"]
    assert only["role"] == "user"
    summary, question = only["content"]
    assert summary["text"].startswith(SUMMARY_PREFIX)
    assert "Fix the failing test." in summary["text"]  # the task, kept by the summary
    assert question == {"type": "text", "text": "Now run the linter."}
    block, text = answer.content
    assert isinstance(block, BetaCompactionBlock)
    assert block.content == summary["text"].removeprefix(SUMMARY_PREFIX)
    assert text.text == "Linted."  # type: ignore[union-attr]
    assert answer.usage.iterations is not None
    assert [i.type for i in answer.usage.iterations] == ["compaction", "message"]
    assert answer.usage.input_tokens == 10  # the upstream's, compaction excluded
    assert answer.context_management is not None
    assert answer.context_management.applied_edits == []

    # The client continues with the block in its history; the upstream sees the summary,
    # the answer and the new question, never a compaction block.
    upstream.then_json(message("Committed."))
    follow = [
        *history,
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": "Commit."},
    ]
    client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=follow,
        context_management=compact(trigger=100_000),
        betas=[BETA],  # type: ignore[arg-type]
    )
    assert upstream.received[1].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": SUMMARY_PREFIX + block.content}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Linted."}]},
        {"role": "user", "content": "Commit."},
    ]


def test_below_the_trigger_nothing_is_compacted(gateway: str, upstream: ScriptedUpstream) -> None:
    history = tool_history(3)
    upstream.then_json(message())
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,
        context_management=compact(100_000),  # type: ignore[arg-type]
    )
    assert upstream.received[0].json()["messages"] == history
    assert [b.type for b in answer.content] == ["text"]


def test_pause_after_compaction_answers_with_the_block_alone(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),  # type: ignore[arg-type]
        context_management=compact(pause_after_compaction=True),
        betas=[BETA],
    )
    assert upstream.received == []
    assert answer.stop_reason == "compaction"
    (block,) = answer.content
    assert isinstance(block, BetaCompactionBlock)
    assert block.content
    assert answer.usage.iterations is not None
    assert answer.usage.iterations[0].type == "compaction"


def test_a_compacting_stream_starts_with_the_block_in_the_documented_events(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_sse(message_stream("Linted."))
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "messages": tool_history(6),
        "context_management": compact(),
    }
    headers = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{gateway}/v1/messages", json=body, headers=headers) as got:
        events = events_of(b"".join(got.iter_bytes()))
    check_anthropic_event_order(events)
    names = [n for n, _ in events if n != "ping"]
    assert names[:4] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]
    start, delta = events[1][1], events[2][1]
    assert start["content_block"] == {
        "type": "compaction",
        "content": None,
        "encrypted_content": None,
    }
    assert delta["delta"]["type"] == "compaction_delta"
    assert delta["delta"]["content"]
    texts = [d for n, d in events if n == "content_block_start"][1:]
    assert [t["index"] for t in texts] == [1]
    final = next(d for n, d in events if n == "message_delta")
    assert [i["type"] for i in final["usage"]["iterations"]] == ["compaction", "message"]


def test_the_sdk_stream_assembles_the_compaction_block(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_sse(message_stream("Linted."))
    with client(gateway).beta.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),
        context_management=compact(),
        betas=[BETA],  # type: ignore[arg-type]
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["compaction", "text"]
    assert final.content[0].content  # type: ignore[union-attr]


def test_count_tokens_applies_blocks_but_never_compacts(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    history = [
        {"role": "user", "content": "old " * 500},
        {
            "role": "assistant",
            "content": [{"type": "compaction", "content": "S"}, {"type": "text", "text": "A"}],
        },
        *tool_history(6)[1:],
    ]
    c = client(gateway)
    counted = c.beta.messages.count_tokens(
        model=MODEL,
        messages=history,
        context_management=compact(trigger=10),  # type: ignore[arg-type]
    )
    folded = c.beta.messages.count_tokens(model=MODEL, messages=apply_blocks(history))  # type: ignore[arg-type]
    assert counted.input_tokens == folded.input_tokens
    assert counted.input_tokens > 2_000  # over the trigger, not compacted
    assert upstream.received == []
    assert AnthropicEstimator().name


async def test_custom_instructions_replace_the_summarizers_prompt() -> None:
    from contextfold.context import SummaryRequest, SummaryResult
    from contextfold.gateway import apply_context_management
    from contextfold.gateway import compact as run

    seen: list[SummaryRequest] = []

    class Recording:
        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            seen.append(request)
            return SummaryResult(fields={"task_overview": "lint", "current_state": "done"})

    edits = compact(instructions="Summarize only the file names. Do not call tools.")
    body = {
        "model": MODEL,
        "max_tokens": 5,
        "messages": tool_history(4),
        "context_management": edits,
    }
    outcome = apply_context_management(body, AnthropicEstimator())
    assert outcome.compaction is not None
    done = await run(outcome.compaction, Recording())
    (request,) = seen
    assert request.instructions == "Summarize only the file names. Do not call tools."
    assert len(request.messages) == len(tool_history(4))
    assert "lint" in done.block["content"]


def test_the_requests_own_model_can_write_the_summary(
    start_gateway: Any, upstream: ScriptedUpstream
) -> None:
    import json as _json

    url = start_gateway(summarize_with="model")
    fields = {
        "task_overview": "Fix the failing test in tests/test_x.py.",
        "current_state": "Read six files; the bug is in src/m3.py.",
        "important_discoveries": "f3 returns None on empty input.",
        "next_steps": "Run the linter.",
        "context_to_preserve": "Use pytest -q.",
    }
    summary_answer = message(_json.dumps(fields))
    summary_answer["usage"] = {"input_tokens": 500, "output_tokens": 60}
    upstream.then_json(summary_answer).then_json(message("Linted."))
    answer = client(url).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),
        context_management=compact(),
        betas=[BETA],  # type: ignore[arg-type]
    )
    summary_call, final_call = upstream.received
    assert summary_call.json()["model"] == MODEL
    assert summary_call.headers["authorization"] == f"Bearer {SECRET}"  # the client's key
    assert "context_management" not in summary_call.json()
    block = answer.content[0]
    assert isinstance(block, BetaCompactionBlock)
    assert block.content is not None
    assert "the bug is in src/m3.py" in block.content
    assert block.content in final_call.json()["messages"][0]["content"][0]["text"]
    assert answer.usage.iterations is not None
    compaction_usage = answer.usage.iterations[0]
    assert (compaction_usage.input_tokens, compaction_usage.output_tokens) == (500, 60)


def test_a_summary_that_fails_gives_a_null_block_and_sends_the_request_as_it_was(
    start_gateway: Any, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(summarize_with="model")
    for _ in range(3):  # every attempt of the summarizer gets prose, not the JSON fields
        upstream.then_json(message("I would rather not summarize."))
    upstream.then_json(message("Linted."))
    history = tool_history(6)
    answer = client(url).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,
        context_management=compact(),
        betas=[BETA],  # type: ignore[arg-type]
    )
    assert upstream.received[-1].json()["messages"] == history
    block = answer.content[0]
    assert isinstance(block, BetaCompactionBlock)
    assert block.content is None
    assert answer.content[1].text == "Linted."  # type: ignore[union-attr]
