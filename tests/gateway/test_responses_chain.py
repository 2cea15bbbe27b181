"""``previous_response_id`` as a conversation's identity on ``/v1/responses`` in
transparent mode, with the ``openai`` SDK as the client.

A client chaining with ``previous_response_id`` (``store: true``) sends only its new
items; their hash (the conversation's key when nothing else names it) differs turn by
turn. The gateway maps each response id it gave back to the conversation that asked, so
a chained request finds its conversation: the results it offloaded on earlier turns can
be read back, while another conversation's stay out of reach. The map is kept in the
``--state`` store, so a restarted gateway still knows the chain.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from contextfold.gateway import READ_TOOL, GatewayConfig, TransparentPolicy, create_app
from contextfold.workspace import SQLiteWorkspace

from .conftest import SECRET
from .openai_reader import MODEL, response, response_events
from .reader import NOTE
from .reads_client import RESPONSES_TOOLS, big_result
from .servers import Received, ScriptedUpstream, serving

POLICY = TransparentPolicy(window=1_000_000, tool_result_limit=400)
ROUTES = {"/v1/responses": POLICY}
_ids = itertools.count(1)


@contextmanager
def gateway(upstream: ScriptedUpstream, **kwargs: Any) -> Iterator[openai.OpenAI]:
    app = create_app(GatewayConfig(upstream=upstream.url), transparent=ROUTES, **kwargs)
    with serving(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)


def answer(text: str, calls: list[dict[str, Any]] | None = None) -> Any:
    """A scripted answer with an id of its own, streamed when the request asks."""
    done = response(0, text, calls or [])
    done["id"] = f"resp_{next(_ids):04d}"

    def reply(_request: Any, got: Received) -> Response:
        if got.json().get("stream"):
            return StreamingResponse(iter([response_events(done)]), media_type="text/event-stream")
        return JSONResponse(done)

    return reply


def read_call(item: str, offset: int, n: int) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_read_{n}",
        "call_id": f"call_read_{n}",
        "name": READ_TOOL,
        "arguments": json.dumps({"id": item, "offset": offset}),
        "status": "completed",
    }


def first_turn(task: str, needle: str) -> list[Any]:
    return [
        {"role": "user", "content": task},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": big_result(needle)},
    ]


def note_of(got: Received) -> tuple[str, int]:
    """The offloaded item and offset the forwarded (cut) output names."""
    found = NOTE.search(json.dumps(got.json()["input"]).replace('\\"', '"'))
    assert found is not None
    return found.group(1), int(found.group(2))


def create(client: openai.OpenAI, stream: bool, **kw: Any) -> Any:
    """One request; the final response (the last event's, when streamed)."""
    if not stream:
        return client.responses.create(model=MODEL, tools=RESPONSES_TOOLS, **kw)
    events = list(client.responses.create(model=MODEL, tools=RESPONSES_TOOLS, stream=True, **kw))
    assert events[-1].type == "response.completed"
    return events[-1].response  # type: ignore[union-attr]


def read_results(got: Received) -> list[str]:
    """The gateway's answers to the read-back calls, in the round it sent them."""
    return [
        str(i["output"]) for i in got.json()["input"] if i.get("type") == "function_call_output"
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_two_chains_side_by_side_each_reads_its_own_items_only(
    upstream: ScriptedUpstream, stream: bool
) -> None:
    with gateway(upstream) as client:
        upstream.then(answer("A: I will look later."))
        a1 = create(client, stream, input=first_turn("Task A", "NEEDLE-A"))
        item_a = note_of(upstream.received[-1])
        upstream.then(answer("B: I will look later."))
        b1 = create(client, stream, input=first_turn("Task B", "NEEDLE-B"))
        item_b = note_of(upstream.received[-1])
        assert a1.id != b1.id

        # A's next turn holds only its new input: the model reads A's item back.
        upstream.then(answer("Reading.", [read_call(*item_a, 1)]))
        upstream.then(answer("Found A."))
        a2 = create(
            client, stream, previous_response_id=a1.id, input=[{"role": "user", "content": "Go."}]
        )
        assert upstream.received[-2].json()["previous_response_id"] == a1.id
        (found_a,) = read_results(upstream.received[-1])
        assert "NEEDLE-A" in found_a

        # B's model reads its own item and A's: only its own is in its conversation.
        upstream.then(answer("Reading.", [read_call(*item_b, 2), read_call(*item_a, 3)]))
        upstream.then(answer("Found B."))
        create(
            client, stream, previous_response_id=b1.id, input=[{"role": "user", "content": "Go."}]
        )
        own, other = read_results(upstream.received[-1])
        assert "NEEDLE-B" in own
        assert other == f"no item {item_a[0]} in this conversation"

        # The id the client got from a turn with a read-back round chains on, too.
        upstream.then(answer("Reading again.", [read_call(*item_a, 4)]))
        upstream.then(answer("Found A again."))
        create(
            client,
            stream,
            previous_response_id=a2.id,
            input=[{"role": "user", "content": "Once more."}],
        )
        (again,) = read_results(upstream.received[-1])
        assert "NEEDLE-A" in again


def test_a_restarted_gateway_knows_the_chain_from_its_sqlite_state(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    path = tmp_path / "gateway.sqlite"
    upstream.then(answer("I will look later."))
    with gateway(upstream, sessions=SQLiteWorkspace(path)) as client:
        first = create(client, False, input=first_turn("Task R", "NEEDLE-R"))
    item = note_of(upstream.received[-1])
    # A new gateway on the same state file: the chained turn reads the item back.
    upstream.then(answer("Reading.", [read_call(*item, 1)]))
    upstream.then(answer("Found it."))
    with gateway(upstream, sessions=SQLiteWorkspace(path)) as client:
        final = create(
            client,
            True,
            previous_response_id=first.id,
            input=[{"role": "user", "content": "Read it now."}],
        )
    (found,) = read_results(upstream.received[-1])
    assert "NEEDLE-R" in found
    assert final.output_text.endswith("Found it.")


def test_a_chained_request_is_never_compacted(upstream: ScriptedUpstream) -> None:
    """Over the trigger, a chained request is still forwarded whole (cut only): the
    gateway cannot see the conversation the upstream holds, so it cannot summarize it."""
    small = {"/v1/responses": TransparentPolicy(window=2_000, trigger=0.5, keep=0.1)}
    app = create_app(GatewayConfig(upstream=upstream.url), transparent=small)
    long_input: list[Any] = []
    for i in range(6):
        long_input.append({"role": "user", "content": f"Step {i}: " + "lorem ipsum " * 200})
        long_input.append({"role": "assistant", "content": f"Done step {i}."})
    long_input.append({"role": "user", "content": "Next."})
    upstream.then(answer("ok"))
    upstream.then(answer("ok"))
    with serving(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        client.responses.create(model=MODEL, input=long_input)
        client.responses.create(model=MODEL, input=long_input, previous_response_id="resp_x")
    compacted, chained = (r.json() for r in upstream.received)
    assert len(compacted["input"]) < len(long_input)  # unchained: compacted
    assert chained["input"] == long_input  # chained: forwarded as sent
