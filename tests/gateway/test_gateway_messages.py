"""``/v1/messages`` and ``/count_tokens`` through the gateway with the official SDK: the
upstream receives the edited request, the client gets Anthropic's documented shapes,
streams keep the documented event order."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types.beta import BetaClearToolUses20250919EditResponse

from contextfold.gateway import CLEARED_RESULT, apply_context_management
from contextfold.token import AnthropicEstimator

from .conftest import SECRET, GatewayFactory
from .history import tool_history
from .servers import ScriptedUpstream, message, message_stream, sse

MODEL = "claude-test"
BETA = "context-management-2025-06-27"
EDITS: Any = {
    "edits": [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 1_000},
            "keep": {"type": "tool_uses", "value": 2},
        }
    ]
}


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)


def results(body: dict[str, Any]) -> list[Any]:
    return [
        b["content"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def expected_upstream_body(history: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"max_tokens": 64, "messages": history, "model": MODEL, "context_management": EDITS}
    return apply_context_management(body, AnthropicEstimator()).body


def test_the_upstream_receives_the_edited_request_and_the_client_the_applied_edits(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    history = tool_history(6)
    upstream.then_json(message("linted"))
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,  # type: ignore[arg-type]
        context_management=EDITS,
        betas=[BETA, "prompt-caching-scope-2026-01-05"],
    )
    (got,) = upstream.received
    sent = got.json()
    assert "context_management" not in sent
    assert results(sent) == [CLEARED_RESULT] * 4 + results({"messages": history})[4:]
    assert sent == expected_upstream_body(history)
    assert got.headers["anthropic-beta"] == "prompt-caching-scope-2026-01-05"
    assert answer.content[0].text == "linted"  # type: ignore[union-attr]
    assert answer.context_management is not None
    (applied,) = answer.context_management.applied_edits
    assert isinstance(applied, BetaClearToolUses20250919EditResponse)
    assert applied.cleared_tool_uses == 4
    assert applied.cleared_input_tokens > 1_000


def test_without_context_management_the_request_and_answer_are_unchanged(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json(message("plain"))
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),
        betas=[BETA],  # type: ignore[arg-type]
    )
    assert upstream.received[0].json()["messages"] == tool_history(6)
    assert upstream.received[0].headers["anthropic-beta"] == BETA
    assert answer.context_management is None


def test_count_tokens_reports_what_will_be_sent(gateway: str, upstream: ScriptedUpstream) -> None:
    history = tool_history(6)
    c = client(gateway)
    counted = c.beta.messages.count_tokens(
        model=MODEL,
        messages=history,
        context_management=EDITS,
        betas=[BETA],  # type: ignore[arg-type]
    )
    assert upstream.received == []  # counted here, by the gateway's counter
    upstream.then_json(message())
    c.beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,
        context_management=EDITS,
        betas=[BETA],  # type: ignore[arg-type]
    )
    sent = upstream.received[0].json()
    plain = c.beta.messages.count_tokens(model=MODEL, messages=sent["messages"])
    assert counted.input_tokens == plain.input_tokens
    assert counted.context_management is not None
    original = c.beta.messages.count_tokens(model=MODEL, messages=history)  # type: ignore[arg-type]
    assert counted.context_management.original_input_tokens == original.input_tokens
    assert counted.input_tokens < original.input_tokens
    raw = httpx.post(
        f"{gateway}/v1/messages/count_tokens",
        json={"model": MODEL, "messages": history},
        headers={"x-api-key": SECRET},
    )
    assert raw.headers["x-contextfold-counter"] == AnthropicEstimator().name


def events_of(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.decode().split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def check_anthropic_event_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Anthropic's documented grammar: message_start, then per block start / deltas of its
    type / stop (each index once), then message_delta, then message_stop; pings anywhere."""
    names = [name for name, _ in events if name != "ping"]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    open_block: dict[str, Any] | None = None
    seen: set[int] = set()
    for name, data in events[1:-2]:
        assert data["type"] == name
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_block is None
            assert data["index"] not in seen
            open_block = data
            seen.add(data["index"])
        elif name == "content_block_delta":
            assert open_block is not None
            assert data["index"] == open_block["index"]
            kind = open_block["content_block"]["type"]
            assert (
                data["delta"]["type"]
                == {
                    "text": "text_delta",
                    "tool_use": "input_json_delta",
                    "compaction": "compaction_delta",
                }[kind]
            )
        elif name == "content_block_stop":
            assert open_block is not None
            assert data["index"] == open_block["index"]
            open_block = None
        else:
            pytest.fail(f"unexpected event {name} between message_start and message_delta")
    assert open_block is None


def test_a_stream_is_relayed_event_by_event_with_applied_edits_on_the_final_delta(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    events = message_stream("Linted: no problems.")
    upstream.then_sse(events)
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "stream": True,
        "messages": tool_history(6),
        "context_management": EDITS,
    }
    headers = {"x-api-key": SECRET, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
    with httpx.stream("POST", f"{gateway}/v1/messages", json=body, headers=headers) as got:
        assert got.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(got.iter_bytes())
    relayed = events_of(raw)
    check_anthropic_event_order(relayed)
    assert [name for name, _ in relayed] == [name for name, _ in events]
    upstream_events = sse(events).split(b"\n\n")
    for event in raw.split(b"\n\n"):  # every event but message_delta, byte for byte
        if not event.startswith(b"event: message_delta"):
            assert event in upstream_events
    delta = next(data for name, data in relayed if name == "message_delta")
    (applied,) = delta["context_management"]["applied_edits"]
    assert applied["type"] == "clear_tool_uses_20250919"
    assert applied["cleared_tool_uses"] == 4
    assert delta["usage"] == {"output_tokens": 3}


def test_the_sdk_stream_sees_the_text_and_the_applied_edits(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_sse(message_stream("Linted: no problems."), delay=0.01)
    seen: list[str] = []
    with client(gateway).beta.messages.stream(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),  # type: ignore[arg-type]
        context_management=EDITS,
        betas=[BETA],
    ) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_message()
    assert "message_start" in seen
    assert "message_stop" in seen
    assert final.content[0].text == "Linted: no problems."  # type: ignore[union-attr]
    assert final.context_management is not None
    assert final.context_management.applied_edits[0].type == "clear_tool_uses_20250919"


def test_a_malformed_edit_is_a_400_and_nothing_is_sent(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    bad: Any = {"edits": [{"type": "clear_tool_uses_20250919", "keep": 3}]}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(gateway).beta.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=tool_history(2),
            context_management=bad,  # type: ignore[arg-type]
        )
    assert "context_management.edits[0].keep" in str(caught.value)
    assert upstream.received == []


def test_an_upstream_error_on_an_edited_request_is_relayed(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    upstream.then_json(error, 529)
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(gateway).beta.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=tool_history(6),
            context_management=EDITS,  # type: ignore[arg-type]
        )
    assert caught.value.status_code == 529
    assert caught.value.body == error


def test_pass_through_sends_the_field_and_its_beta_upstream_as_sent(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(pass_through_context_management=True)
    history = tool_history(6)
    upstream.then_json(message(context_management={"applied_edits": []}))
    answer = client(url).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=history,
        context_management=EDITS,
        betas=[BETA],  # type: ignore[arg-type]
    )
    (got,) = upstream.received
    assert got.json()["context_management"] == EDITS
    assert got.json()["messages"] == history
    assert got.headers["anthropic-beta"] == BETA
    assert answer.context_management is not None
    assert answer.context_management.applied_edits == []


def test_the_metrics_count_the_edits_and_the_tokens_they_saved(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_json(message())
    answer = client(gateway).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=tool_history(6),
        context_management=EDITS,  # type: ignore[arg-type]
    )
    assert answer.context_management is not None
    saved = answer.context_management.applied_edits[0].cleared_input_tokens
    lines = set(httpx.get(f"{gateway}/metrics").text.splitlines())
    assert f"contextfold_gateway_tokens_saved_total {saved}" in lines
    assert 'contextfold_gateway_context_edits_total{type="clear_tool_uses_20250919"} 1' in lines
