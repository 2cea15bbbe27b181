"""The cache-read share on ``/metrics``: the usage the upstream reports in each relayed
answer (Anthropic, OpenAI chat, OpenAI Responses; whole or streamed) is tallied, and the
share of input tokens read from the provider's cache is served."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.gateway._usage import AnswerUsage, answer_usage

from .conftest import SECRET
from .servers import ScriptedUpstream, message, message_stream, sse

MODEL = "claude-test"

ANTHROPIC_USAGE = {
    "input_tokens": 40,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 60,
    "output_tokens": 7,
}


def chat_answer(cached: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "pong"},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 1000,
            "completion_tokens": 5,
            "total_tokens": 1005,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def chat_stream(cached: int) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
    parts = [
        {**chunk, "choices": [{"index": 0, "delta": {"content": "po"}}], "usage": None},
        {**chunk, "choices": [{"index": 0, "delta": {"content": "ng"}}], "usage": None},
        {**chunk, "choices": [], "usage": chat_answer(cached)["usage"]},
    ]
    return b"".join(b"data: %s\n\n" % json.dumps(p).encode() for p in parts) + b"data: [DONE]\n\n"


RESPONSES_USAGE = {
    "input_tokens": 500,
    "input_tokens_details": {"cached_tokens": 450},
    "output_tokens": 9,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 509,
}


def responses_stream() -> bytes:
    created = {"type": "response.created", "response": {"id": "resp_1", "usage": None}}
    done = {"type": "response.completed", "response": {"id": "resp_1", "usage": RESPONSES_USAGE}}
    return sse([("response.created", created), ("response.completed", done)])


def anthropic_stream() -> bytes:
    events = message_stream("Hello there")
    events[0][1]["message"]["usage"] = {**ANTHROPIC_USAGE, "output_tokens": 1}
    events[-2][1]["usage"] = {"output_tokens": 7}  # message_delta: cumulative output
    return sse(events)


EXPECTED_ANTHROPIC = Counter(input=40, cache_read=900, cache_write=60, output=7)


def test_each_dialects_usage_is_read_whole_and_streamed() -> None:
    whole = {**message("x"), "usage": ANTHROPIC_USAGE}
    assert answer_usage(json.dumps(whole).encode()) == EXPECTED_ANTHROPIC
    assert answer_usage(json.dumps(chat_answer(600)).encode()) == Counter(
        input=400, cache_read=600, output=5
    )
    response = {"id": "resp_1", "object": "response", "output": [], "usage": RESPONSES_USAGE}
    expected_responses = Counter(input=50, cache_read=450, output=9)
    assert answer_usage(json.dumps(response).encode()) == expected_responses
    streams = [
        (anthropic_stream(), EXPECTED_ANTHROPIC),
        (chat_stream(600), Counter(input=400, cache_read=600, output=5)),
        (responses_stream(), expected_responses),
    ]
    for data, expected in streams:
        tally = AnswerUsage("text/event-stream; charset=utf-8")
        tally.feed(data)
        assert +tally.tokens() == expected


def test_answers_without_usage_or_not_json_count_nothing() -> None:
    for data in (b'{"input_tokens": 12}', b"not json", b"[1, 2]", b'{"usage": "x"}'):
        assert +answer_usage(data) == Counter()
    tally = AnswerUsage("text/plain")
    tally.feed(json.dumps(message("x")).encode())
    assert tally.tokens() == Counter()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_stream_cut_anywhere_gives_the_same_usage(data: st.DataObject) -> None:
    stream = data.draw(st.sampled_from([anthropic_stream(), chat_stream(300), responses_stream()]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    whole = AnswerUsage("text/event-stream")
    whole.feed(stream)
    pieces = AnswerUsage("text/event-stream")
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        pieces.feed(stream[start:end])
    assert +pieces.tokens() == +whole.tokens() != Counter()


def metric(gateway: str, name: str) -> dict[str, float]:
    """Each line of ``name`` on ``/metrics``: its labels (or '') -> value."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{gateway}/metrics").text.splitlines():
        if line.startswith(f"contextfold_gateway_{name}"):
            key, value = line.rsplit(" ", 1)
            out[key.removeprefix(f"contextfold_gateway_{name}")] = float(value)
    return out


def test_the_metrics_show_what_the_upstream_read_from_its_cache(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    """Through the official SDKs, whole and streamed, Anthropic's and OpenAI's shapes."""
    from starlette.responses import Response

    def stream(body: bytes) -> Any:
        return lambda _r, _x: Response(body, media_type="text/event-stream")

    upstream.then_json({**message("a"), "usage": ANTHROPIC_USAGE})
    upstream.then(stream(anthropic_stream()))
    upstream.then_json(chat_answer(600))
    upstream.then(stream(chat_stream(600)))
    upstream.then_json({"type": "error", "usage": ANTHROPIC_USAGE}, status=529)
    claude = anthropic.Anthropic(base_url=gateway, api_key=SECRET, max_retries=0)
    asked: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    claude.messages.create(**asked)
    with claude.messages.stream(**asked) as streamed:
        streamed.until_done()
    gpt = openai.OpenAI(base_url=f"{gateway}/v1", api_key=SECRET, max_retries=0)
    said: list[Any] = [{"role": "user", "content": "ping"}]
    gpt.chat.completions.create(model="gpt-test", messages=said)
    chunks = gpt.chat.completions.create(
        model="gpt-test", messages=said, stream=True, stream_options={"include_usage": True}
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "pong"
    with pytest.raises(anthropic.APIStatusError) as error:  # relayed, not counted
        claude.messages.create(**asked)
    assert error.value.status_code == 529
    tokens = metric(gateway, "upstream_tokens_total")
    assert tokens == {
        '{kind="cache_read"}': 900 * 2 + 600 * 2,
        '{kind="cache_write"}': 60 * 2,
        '{kind="input"}': 40 * 2 + 400 * 2,
        '{kind="output"}': 7 * 2 + 5 * 2,
    }
    (share,) = metric(gateway, "upstream_cache_read_share").values()
    assert share == (1800 + 1200) / (1800 + 1200 + 120 + 880)
