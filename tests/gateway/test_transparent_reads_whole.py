"""A streamed request whose later read-back round the upstream answers whole (JSON, not a
stream: some OpenAI- and Anthropic-compatible servers ignore ``stream`` on some requests,
or answer tool-heavy turns whole). The client asked for a stream and already has its
first events: the whole answer must reach it as the rest of that stream, with the
terminal events its SDK waits for (``message_delta`` and ``message_stop``; one finish
chunk and ``[DONE]``; ``response.completed``). Official SDKs as clients."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from contextfold.gateway import READ_TOOL

from .openai_reader import MODEL as OPENAI_MODEL
from .openai_reader import decide_chat, decide_responses, then_chat_reader, then_responses_reader
from .reader import decide, then_reader
from .reads_client import (
    CHAT_TOOLS,
    POLICY,
    RESPONSES_TOOLS,
    Agent,
    chat_history,
    check_grammar,
    events,
    gateway,
    leaks,
    post_stream,
    responses_history,
    sdk_stream,
)
from .servers import Received, ScriptedUpstream
from .test_transparent import transparent_gateway


def _whole(decider: Any) -> Any:
    """A scripted answer given whole whatever the request asked."""

    def answer(_request: Any, got: Received) -> Response:
        body = got.json()
        assert body.get("stream") is True  # the gateway asked for a stream
        return JSONResponse(decider(body))

    return answer


def test_anthropic_stream_ends_with_message_stop_when_a_later_round_is_whole(
    upstream: ScriptedUpstream,
) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-W")
    agent.long_step()
    then_reader(upstream, 1)
    upstream.then(_whole(decide))
    with transparent_gateway(upstream, POLICY) as url:
        raw = post_stream(url, agent)
        then_reader(upstream, 1)
        upstream.then(_whole(decide))
        text, final = sdk_stream(url, agent)
    assert not leaks(raw)
    check_grammar(events(raw))
    assert text == "Reading the rest.Found: NEEDLE-W-0 is defined in src/config.py:42"
    assert [b.type for b in final.content] == ["text", "text"]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (20, 4)
    assert len(upstream.received) == 4


def test_chat_stream_ends_with_finish_usage_and_done_when_a_later_round_is_whole(
    upstream: ScriptedUpstream,
) -> None:
    then_chat_reader(upstream, 1)
    upstream.then(_whole(decide_chat))
    with gateway(upstream) as client:
        with client.chat.completions.with_streaming_response.create(
            model=OPENAI_MODEL,
            messages=chat_history("NEEDLE-CW"),
            tools=CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        ) as raw_response:
            raw = raw_response.read()
        then_chat_reader(upstream, 1)
        upstream.then(_whole(decide_chat))
        chunks = list(
            client.chat.completions.create(
                model=OPENAI_MODEL,
                messages=chat_history("NEEDLE-CW"),
                tools=CHAT_TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert raw.endswith(b"data: [DONE]\n\n")
    assert READ_TOOL.encode() not in raw
    assert {c.id for c in chunks} == {"chatcmpl-4"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Reading the rest.\n\nFound: NEEDLE-CW is defined in src/config.py:42"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f] == ["stop"]
    (usage_chunk,) = [c for c in chunks if not c.choices]
    assert usage_chunk.usage is not None
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (100, 10)


def test_responses_stream_ends_with_completed_when_a_later_round_is_whole(
    upstream: ScriptedUpstream,
) -> None:
    then_responses_reader(upstream, 1)
    upstream.then(_whole(decide_responses))
    with gateway(upstream) as client:
        stream_events = list(
            client.responses.create(
                model=OPENAI_MODEL,
                input=responses_history("NEEDLE-RW"),
                tools=RESPONSES_TOOLS,
                stream=True,
            )
        )
    assert not any(READ_TOOL in e.model_dump_json() for e in stream_events)
    assert [e.sequence_number for e in stream_events] == list(range(len(stream_events)))
    names = [e.type for e in stream_events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert names.count("response.completed") == 1
    added = [e.output_index for e in stream_events if e.type == "response.output_item.added"]  # type: ignore[union-attr]
    assert added == list(range(len(added))) == [0, 1]
    deltas = "".join(
        e.delta  # type: ignore[union-attr]
        for e in stream_events
        if e.type == "response.output_text.delta"
    )
    final = stream_events[-1].response  # type: ignore[union-attr]
    assert deltas == final.output_text
    assert final.output_text == "Reading the rest.Found: NEEDLE-RW is defined in src/config.py:42"
    assert final.id == "resp_6"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (80, 6)


def test_a_whole_later_round_that_is_not_an_answer_ends_the_stream_with_an_error(
    upstream: ScriptedUpstream,
) -> None:
    """A later round answered whole with something that is no message: the client's
    stream ends with an ``error`` event, not silently."""
    agent = Agent("Where is the needle defined?", "NEEDLE-E")
    agent.long_step()
    then_reader(upstream, 1)
    upstream.then(lambda _r, _g: JSONResponse({"unexpected": True}))
    with transparent_gateway(upstream, POLICY) as url:
        raw = post_stream(url, agent)
    names = [name for name, _ in events(raw)]
    assert names[0] == "message_start"
    assert names[-1] == "error"
    assert json.loads(raw.decode().strip().split("\n\n")[-1].split("data: ", 1)[1])["error"][
        "type"
    ] == ("api_error")
