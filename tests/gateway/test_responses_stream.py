"""Streamed Responses through the gateway: the compaction item's ``output_item.added`` and
``.done`` events in the documented place, every other event relayed in order with its
``output_index`` and ``sequence_number`` moved up, checked event by event with the SDK."""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import ResponseCompactionItem

from .servers import ScriptedUpstream
from .test_responses import MODEL, client, compaction, history, response, summary_items, text_of


def response_events(text: str = "Linted.") -> list[tuple[str, dict[str, Any]]]:
    """The documented event order of a streamed one-message answer."""
    done = response(text)
    start = {**done, "status": "in_progress", "output": [], "usage": None}
    message = done["output"][0]
    part = message["content"][0]
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": start}),
        ("response.in_progress", {"type": "response.in_progress", "response": start}),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**message, "status": "in_progress", "content": []},
            },
        ),
        (
            "response.content_part.added",
            {
                "type": "response.content_part.added",
                "item_id": message["id"],
                "output_index": 0,
                "content_index": 0,
                "part": {**part, "text": ""},
            },
        ),
        *[
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": message["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                },
            )
            for piece in (text[:3], text[3:])
        ],
        (
            "response.output_text.done",
            {
                "type": "response.output_text.done",
                "item_id": message["id"],
                "output_index": 0,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
        ),
        (
            "response.content_part.done",
            {
                "type": "response.content_part.done",
                "item_id": message["id"],
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
        ),
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": message},
        ),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]
    return [(name, {**data, "sequence_number": n}) for n, (name, data) in enumerate(events)]


def check_sequence(events: list[Any]) -> None:
    """Sequence numbers count up from 0 by one, as OpenAI sends them."""
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_streamed_compaction_emits_its_item_first_and_shifts_the_rest(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    upstream.then_sse(response_events("Linted."))
    items = history("Fix the failing test in src/mod_3.py.")
    stream = client(gateway).responses.create(
        model=MODEL, input=items, context_management=compaction(), stream=True
    )
    events = list(stream)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the compaction item
        "response.output_item.done",
        "response.output_item.added",  # the upstream's message, one index up
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    check_sequence(events)
    added, done = events[2], events[3]
    assert isinstance(added.item, ResponseCompactionItem)  # type: ignore[union-attr]
    assert isinstance(done.item, ResponseCompactionItem)  # type: ignore[union-attr]
    assert added.output_index == done.output_index == 0  # type: ignore[union-attr]
    assert added.item.id == done.item.id  # type: ignore[union-attr]
    assert done.item.encrypted_content  # type: ignore[union-attr]
    assert {e.output_index for e in events[4:11]} == {1}  # type: ignore[union-attr]
    assert "".join(e.delta for e in events[6:8]) == "Linted."  # type: ignore[union-attr]
    completed = events[-1].response  # type: ignore[union-attr]
    assert [o.type for o in completed.output] == ["compaction", "message"]
    assert completed.output[0] == done.item
    assert completed.output_text == "Linted."

    sent = upstream.received[0].json()
    assert "context_management" not in sent
    assert sent["stream"] is True
    assert len(summary_items(sent["input"])) == 1

    # The streamed item expands like the non-streamed one.
    upstream.then_json(response("ok"))
    item = done.item.model_dump(exclude_none=True)  # type: ignore[union-attr]
    client(gateway).responses.create(model=MODEL, input=[item, {"role": "user", "content": "go"}])
    (summary,) = summary_items(upstream.received[1].json()["input"])
    assert "src/mod_3.py" in text_of(summary)


def test_a_stream_below_the_threshold_is_relayed_event_for_event(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    events = response_events("hi there")
    upstream.then_sse(events)
    with client(gateway).with_streaming_response.responses.create(
        model=MODEL, input="hello", context_management=compaction(100_000), stream=True
    ) as raw:
        body = raw.read().decode()
    got = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    assert got == [data for _, data in events]
    assert "context_management" not in upstream.received[0].json()


def test_a_streamed_compaction_trigger_is_one_item_between_created_and_completed(
    gateway: str, upstream: ScriptedUpstream
) -> None:
    items = history("Fix the failing test in src/mod_3.py.")
    stream = client(gateway).responses.create(
        model=MODEL, input=[*items, {"type": "compaction_trigger"}], stream=True
    )
    events = list(stream)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    check_sequence(events)
    assert upstream.received == []
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.status == "completed"
    (item,) = completed.output
    assert isinstance(item, ResponseCompactionItem)
    assert item == events[3].item  # type: ignore[union-attr]
