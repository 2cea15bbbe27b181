"""The per-request work stays proportional to what is new: the body parsed once with its
parts located (``_wire``), the client's bytes forwarded where nothing changed, and in
transparent mode only the messages the previous request did not show digested and
counted (``_prefix``), with the same result as computing everything again."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from typing import Any

import httpx
import pytest

from contextfold.context import ExtractiveSummarizer
from contextfold.gateway import (
    CountCache,
    GatewayConfig,
    SessionState,
    TransparentPolicy,
    _prefix,
    _transparent,
    create_app,
)
from contextfold.gateway._prefix import checkpoint_after, recall
from contextfold.gateway._transparent import forward
from contextfold.gateway._wire import ParsedBody, parse_body
from contextfold.token import AnthropicEstimator

from .conftest import SECRET
from .servers import ScriptedUpstream, message, serving

HEADERS = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}


def history(n: int, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test é."}]
    for i in range(n):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}"},
                    {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"k": i}},
                ],
            }
        )
        text = "\n".join(f"def f{i}_{j}(x):  # {rng.random()}" for j in range(rng.randint(5, 80)))
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}],
            }
        )
    return messages


def plain(value: Any) -> Any:
    """``value`` without ``cache_control`` markers (the gateway adds its own)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def turn(messages: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The request at ``n`` messages, its one breakpoint on the last block (Claude Code)."""
    shown = copy.deepcopy(messages[:n])
    if isinstance(shown[-1]["content"], list):
        shown[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "m", "max_tokens": 10, "system": "You are a coder.", "messages": shown}


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b' { "messages" : [ {"role":"user"} , 1 ] , "x" : "\\u00e9\xc3\xa9" } ',
        b'{"messages": 5}',
        b'{"a":1,"a":2,"messages":[]}',
        b'\xef\xbb\xbf{"a":1}',
        b"[1]",
        b'{"a":1,}',
        b'{"messages":[1 2]}',
        b'{"a":1} x',
        b"",
        b'{"a":"\\ud800"}',
    ],
)
def test_the_body_is_parsed_exactly_as_json_loads_parses_it(raw: bytes) -> None:
    try:
        expected: Any = ("value", json.loads(raw))
    except ValueError as exc:
        expected = ("error", type(exc))
    try:
        parsed = parse_body(raw)
        got: Any = ("value", parsed.data if isinstance(parsed, ParsedBody) else parsed)
    except ValueError as exc:
        got = ("error", type(exc))
    assert got == expected


def test_what_is_forwarded_reuses_the_clients_bytes_and_means_what_was_built() -> None:
    raw = json.dumps(turn(history(60), 121), ensure_ascii=True).encode()
    parsed = parse_body(raw)
    assert isinstance(parsed, ParsedBody)
    data = parsed.data
    assert parsed.dumps(data) == raw  # nothing changed: the very bytes
    rng = random.Random(1)
    messages = data["messages"]
    for _ in range(200):
        a = rng.randrange(len(messages))
        kept = list(messages[a : rng.randrange(a, len(messages) + 1)])
        if kept and rng.random() < 0.5:
            k = rng.randrange(len(kept))
            kept[k] = {**kept[k], "extra": 1}
        if rng.random() < 0.3:
            kept.insert(0, {"role": "user", "content": "summary"})
        out = {**data, "messages": kept, "system": "changed"}
        assert json.loads(parsed.dumps(out)) == out
    # An unchanged message is the client's own text, spaces and escapes included.
    out = {k: v for k, v in data.items() if k != "system"}
    assert json.dumps(messages[5], ensure_ascii=True).encode() in parsed.dumps(out)


@pytest.mark.parametrize(("limit", "indent"), [(None, None), (200, 1)])
def test_the_incremental_transform_forwards_what_the_full_one_does(
    limit: int | None, indent: int | None
) -> None:
    """A conversation growing two messages a turn, through compactions: the same body,
    state and counts as digesting and counting every message each turn."""
    policy = TransparentPolicy(window=30_000, tool_result_limit=limit)
    counter, summarizer = AnthropicEstimator(), ExtractiveSummarizer()
    messages = history(100)

    async def run() -> tuple[int, int]:
        full, state, checkpoint = SessionState(), SessionState(), None
        matched = 0
        for n in range(3, len(messages), 2):
            raw = json.dumps(turn(messages, n), indent=indent, ensure_ascii=False).encode()
            expected = await forward(
                json.loads(raw), full, policy, counter=counter, summarizer=summarizer
            )
            parsed = parse_body(raw)
            assert isinstance(parsed, ParsedBody)
            known = recall(parsed, checkpoint, counter)
            assert known is not None
            matched += known.mark is not None
            got = await forward(
                parsed.data, state, policy, counter=counter, summarizer=summarizer, known=known
            )
            assert got.body == expected.body
            assert got.state == expected.state
            assert (got.input_tokens, got.original_tokens, got.compacted) == (
                expected.input_tokens,
                expected.original_tokens,
                expected.compacted,
            )
            assert json.loads(parsed.dumps(got.body)) == got.body
            assert got.counted is not None
            checkpoint = checkpoint_after(known, counter, got.counted)
            full, state = expected.state, got.state
        return matched, state.compactions

    matched, compactions = asyncio.run(run())
    assert matched == len(range(3, len(messages), 2)) - 1  # every turn after the first
    assert compactions >= (1 if limit else 3)


def test_a_changed_old_message_is_not_taken_for_the_previous_prefix() -> None:
    counter = AnthropicEstimator()
    policy = TransparentPolicy(window=1_000_000)
    messages = history(30)

    async def run() -> None:
        raw = json.dumps(turn(messages, 41)).encode()
        parsed = parse_body(raw)
        assert isinstance(parsed, ParsedBody)
        known = recall(parsed, None, counter)
        assert known is not None
        done = await forward(
            parsed.data,
            SessionState(),
            policy,
            counter=counter,
            summarizer=ExtractiveSummarizer(),
            known=known,
        )
        assert done.counted is not None
        checkpoint = checkpoint_after(known, counter, done.counted)
        rewritten = turn(messages, 43)
        rewritten["messages"][2]["content"][0]["content"] += " edited"
        again = parse_body(json.dumps(rewritten).encode())
        assert isinstance(again, ParsedBody)
        later = recall(again, checkpoint, counter)
        assert later is not None
        assert later.mark is None  # the bytes differ from message 2 on: nothing reused
        fresh = await forward(
            json.loads(json.dumps(rewritten)),
            done.state,
            policy,
            counter=counter,
            summarizer=ExtractiveSummarizer(),
        )
        reused = await forward(
            again.data,
            done.state,
            policy,
            counter=counter,
            summarizer=ExtractiveSummarizer(),
            known=later,
        )
        assert (reused.body, reused.state, reused.input_tokens) == (
            fresh.body,
            fresh.state,
            fresh.input_tokens,
        )

    asyncio.run(run())


def test_a_turn_through_the_gateway_digests_and_counts_only_its_new_messages(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the incremental path every turn digested (and looked up the count of) all
    its messages again."""
    digested: list[int] = []
    original = _transparent.content_digest

    def counting(previous: str, value: Any) -> str:
        digested.append(1)
        return original(previous, value)

    counted: list[int] = []
    count = CountCache.count

    def counting_tokens(self: CountCache, counter: Any, raw: Any) -> int:
        counted.append(1)
        return count(self, counter, raw)

    monkeypatch.setattr(CountCache, "count", counting_tokens)
    monkeypatch.setattr(_transparent, "content_digest", counting)
    if hasattr(_prefix, "content_digest"):
        monkeypatch.setattr(_prefix, "content_digest", counting)
    messages = history(100)
    app = create_app(
        GatewayConfig(upstream=upstream.url), transparent=TransparentPolicy(window=1_000_000)
    )
    headers = {**HEADERS, "x-contextfold-session": "one"}
    per_turn, counts_per_turn = [], []
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        for n in (151, 153, 153, 155):  # the same turn twice: a client retrying
            upstream.then_json(message("ok"))
            digested.clear()
            counted.clear()
            body = json.dumps(turn(messages, n)).encode()
            http.post("/v1/messages", content=body, headers=headers).raise_for_status()
            per_turn.append(len(digested))
            counts_per_turn.append(len(counted))
            assert plain(upstream.received[-1].json()) == plain(turn(messages, n))
    assert per_turn[0] >= 150  # the first request of a conversation: every message
    assert max(per_turn[1:]) <= 6  # later turns: the two new ones and the moved marker's
    # Counted: the new messages and the few around the boundaries kept, not the history.
    assert counts_per_turn[0] >= 150
    assert max(counts_per_turn[1:]) <= 12


def test_a_request_with_nothing_to_change_reaches_the_upstream_byte_for_byte(
    upstream: ScriptedUpstream,
) -> None:
    """Before, the gateway re-serialized every request it parsed (spaces, escapes and all
    rewritten); now what it does not change is forwarded as the client sent it."""
    body = json.dumps(turn(history(5), 11), ensure_ascii=True).encode()
    app = create_app(GatewayConfig(upstream=upstream.url))
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        upstream.then_json(message("ok"))
        http.post("/v1/messages", content=body, headers=HEADERS).raise_for_status()
        assert upstream.received[-1].body == body
        # With Claude Code's no-op field: stripped, everything else as sent.
        noop = json.loads(body)
        noop["context_management"] = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
        raw = json.dumps(noop, ensure_ascii=True).encode()
        upstream.then_json(message("ok"))
        http.post("/v1/messages", content=raw, headers=HEADERS).raise_for_status()
        got = upstream.received[-1]
        assert "context_management" not in got.json()
        assert got.json() == json.loads(body)
        for message_ in json.loads(body)["messages"]:
            assert json.dumps(message_, ensure_ascii=True).encode() in got.body


def test_count_cache_is_shared_not_required() -> None:
    """The incremental counts equal a count of the whole request by the shared cache."""
    counter = AnthropicEstimator()
    body = turn(history(20), 41)
    raw = json.dumps(body).encode()
    parsed = parse_body(raw)
    assert isinstance(parsed, ParsedBody)
    known = recall(parsed, None, counter)
    assert known is not None
    done = asyncio.run(
        forward(
            parsed.data,
            SessionState(),
            TransparentPolicy(window=1_000_000, breakpoints=False),
            counter=counter,
            summarizer=ExtractiveSummarizer(),
            counts=CountCache(),
            known=known,
        )
    )
    counts = CountCache()
    expected = counts.fixed(counter, body["system"], None) + sum(
        counts.count(counter, m) for m in body["messages"]
    )
    assert done.input_tokens == expected


def test_count_tokens_in_a_conversation_counts_only_what_is_new(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``count_tokens`` reads the conversation's checkpoint too (it digested and counted
    every message before); its answer is the same as a gateway that never saw it."""
    digested: list[int] = []
    original = _transparent.content_digest

    def counting(previous: str, value: Any) -> str:
        digested.append(1)
        return original(previous, value)

    counted: list[int] = []
    count = CountCache.count

    def counting_tokens(self: CountCache, counter: Any, raw: Any) -> int:
        counted.append(1)
        return count(self, counter, raw)

    monkeypatch.setattr(CountCache, "count", counting_tokens)
    monkeypatch.setattr(_transparent, "content_digest", counting)
    monkeypatch.setattr(_prefix, "content_digest", counting)
    messages = history(100)
    policy = TransparentPolicy(window=1_000_000)
    headers = {**HEADERS, "x-contextfold-session": "one"}
    noop = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    asked = json.dumps({**turn(messages, 153), "context_management": noop}).encode()
    with (
        serving(create_app(GatewayConfig(upstream=upstream.url), transparent=policy)) as url,
        serving(create_app(GatewayConfig(upstream=upstream.url), transparent=policy)) as fresh,
        httpx.Client(timeout=30) as http,
    ):
        upstream.then_json(message("ok"))
        body = json.dumps(turn(messages, 151)).encode()
        http.post(f"{url}/v1/messages", content=body, headers=headers).raise_for_status()
        digested.clear()
        counted.clear()
        answer = http.post(f"{url}/v1/messages/count_tokens", content=asked, headers=headers)
        assert len(digested) <= 6
        assert len(counted) <= 12
        expected = http.post(
            f"{fresh}/v1/messages/count_tokens", content=asked, headers=headers
        ).json()
    assert answer.json() == expected
    assert expected["input_tokens"] > 50_000


def test_a_member_appended_to_in_place_is_not_forwarded_as_it_was_parsed() -> None:
    """The gateway's code builds new values, but a list grown in place (a tool appended
    to ``tools``) must still be forwarded as it now is, not as the client sent it."""
    raw = b'{"model": "m", "tools": [{"name": "a"}], "messages": [{"role": "user"}]}'
    parsed = parse_body(raw)
    assert isinstance(parsed, ParsedBody)
    assert parsed.dumps(parsed.data) == raw
    parsed.data["tools"].append({"name": "b"})
    assert json.loads(parsed.dumps(parsed.data)) == parsed.data
    parsed.data["extra"] = 1
    assert json.loads(parsed.dumps(parsed.data)) == parsed.data
