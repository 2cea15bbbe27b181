"""Transparent mode's compaction on the OpenAI routes with ``--summarizer model``: the
request's own model writes the summary, called through the upstream in the route's own
wire format (a Chat Completions call on ``/v1/chat/completions``, a Responses call on
``/v1/responses``) with the client's key; the summary it writes is what the upstream
receives in place of the oldest messages; the prefix still changes only at a compaction;
a summary call that fails leaves the request uncompacted (fail open). ``openai`` SDK as
the client, a scripted upstream that answers the summary calls with the fields."""

from __future__ import annotations

import json
from typing import Any

import openai
from starlette.responses import JSONResponse, Response

from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app
from contextfold.message import SUMMARY_TOOL

from .conftest import SECRET
from .servers import Received, ScriptedUpstream, serving
from .test_responses import FIELDS, key_file, response
from .test_transparent_chat import (
    CHAT,
    TOOLS,
    ChatConversation,
    completion,
    is_summary,
    pairs_intact,
    prefix_kept,
)
from .test_transparent_responses import INSTRUCTIONS, ROUTE, CodexLoop, intact
from .test_transparent_responses import TOOLS as RESPONSES_TOOLS
from .test_transparent_responses import is_summary as is_responses_summary

__all__ = ["key_file"]  # the autouse fixture: each test seals with a key of its own

POLICY = TransparentPolicy(
    window=8_000, trigger=0.8, keep=0.25, tool_result_limit=600, summarize_with="model"
)


def _names(body: dict[str, Any]) -> list[Any]:
    out = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        out.append(function.get("name"))
    return out


def is_summary_call(body: dict[str, Any]) -> bool:
    return SUMMARY_TOOL in _names(body)


def summary_completion() -> dict[str, Any]:
    call = {
        "id": "call_summary",
        "type": "function",
        "function": {"name": SUMMARY_TOOL, "arguments": json.dumps(FIELDS)},
    }
    answer = completion("")
    answer["choices"][0]["message"]["tool_calls"] = [call]
    answer["choices"][0]["finish_reason"] = "tool_calls"
    return answer


def summary_response() -> dict[str, Any]:
    answer = response("")
    answer["output"] = [
        {
            "type": "function_call",
            "id": "fc_summary",
            "call_id": "call_summary",
            "name": SUMMARY_TOOL,
            "arguments": json.dumps(FIELDS),
            "status": "completed",
        }
    ]
    return answer


class Dispatch:
    """The upstream: summary calls answered by ``summary`` (kept in ``calls``), every
    other request by ``answer`` (kept in ``turns``)."""

    def __init__(self, upstream: ScriptedUpstream, summary: Any, answer: Any) -> None:
        self.calls: list[Received] = []
        self.turns: list[Received] = []
        self.summary = summary
        self.answer = answer
        for _ in range(400):
            upstream.then(self)

    def __call__(self, _request: Any, got: Received) -> Response:
        if is_summary_call(got.json()):
            self.calls.append(got)
            return self.summary()  # type: ignore[no-any-return]
        self.turns.append(got)
        return JSONResponse(self.answer())


def chat_turns(dispatch: Dispatch, upstream: ScriptedUpstream, turns: int) -> list[dict[str, Any]]:
    app = create_app(GatewayConfig(upstream=upstream.url), transparent={CHAT: POLICY})
    conversation = ChatConversation("Find every item and fix it.")
    with serving(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        for _ in range(turns):
            conversation.step()
            client.chat.completions.create(
                model="m",
                messages=conversation.history,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                max_tokens=256,
            )
    return [t.json() for t in dispatch.turns]


def test_the_chat_route_compacts_with_the_requests_own_model(upstream: ScriptedUpstream) -> None:
    dispatch = Dispatch(upstream, lambda: JSONResponse(summary_completion()), completion)
    bodies = chat_turns(dispatch, upstream, 30)
    assert len(bodies) == 30
    summarized = [i for i, b in enumerate(bodies) if is_summary(b["messages"][1])]
    assert summarized, "30 turns of cut results pass 80% of 8,000 tokens"
    # The summary call: Chat Completions, the request's model, the client's key, its
    # output-length field, not streamed, the summary tool forced, the folded turns shown.
    call = dispatch.calls[0]
    sent = call.json()
    assert call.path == CHAT
    assert call.headers["authorization"] == f"Bearer {SECRET}"
    assert sent["model"] == "m"
    assert sent["max_tokens"] > 0
    assert "max_completion_tokens" not in sent
    assert "stream" not in sent
    assert sent["tool_choice"] == {"type": "function", "function": {"name": SUMMARY_TOOL}}
    assert "item_0" in json.dumps(sent["messages"])
    # What it wrote is what the upstream receives in place of the oldest messages.
    first = bodies[summarized[0]]["messages"]
    assert FIELDS["current_state"] in first[1]["content"]
    for body in bodies:
        assert pairs_intact(body["messages"][1:])
    # The prefix changes only when a summary is written, and each one is written once.
    changes = [i for i in range(1, len(bodies)) if not prefix_kept(bodies[i - 1], bodies[i])]
    assert changes == [
        i
        for i in range(1, len(bodies))
        if is_summary(bodies[i]["messages"][1])
        and bodies[i]["messages"][1] != bodies[i - 1]["messages"][1]
    ]
    # No call for an attempt the cost guard refuses whatever the summary says: at most
    # two per compaction (a second when the first summary left too little room).
    assert len(changes) <= len(dispatch.calls) <= 2 * len(changes)


def test_a_failing_summary_call_leaves_the_chat_request_uncompacted(
    upstream: ScriptedUpstream,
) -> None:
    failed = {"error": {"message": "overloaded", "type": "server_error"}}
    dispatch = Dispatch(upstream, lambda: JSONResponse(failed, status_code=500), completion)
    bodies = chat_turns(dispatch, upstream, 20)
    assert dispatch.calls, "the trigger was passed and the model was asked"
    assert not any(is_summary(b["messages"][1]) for b in bodies)
    assert [len(b["messages"]) for b in bodies] == [2 + 2 * i for i in range(1, 21)]
    assert "omitted by the gateway" in bodies[-1]["messages"][-1]["content"]


def test_the_responses_route_compacts_with_the_requests_own_model(
    upstream: ScriptedUpstream,
) -> None:
    dispatch = Dispatch(upstream, lambda: JSONResponse(summary_response()), lambda: response("ok"))
    app = create_app(GatewayConfig(upstream=upstream.url), transparent={ROUTE: POLICY})
    loop = CodexLoop("Find every item and fix it.")
    with serving(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
        for _ in range(30):
            loop.step()
            client.responses.create(
                model="gpt-test",
                instructions=INSTRUCTIONS,
                input=loop.items,  # type: ignore[arg-type]
                tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
                store=False,
            )
    bodies = [t.json() for t in dispatch.turns]
    summarized = [i for i, b in enumerate(bodies) if is_responses_summary(b["input"][1])]
    assert summarized
    call = dispatch.calls[0]
    sent = call.json()
    assert call.path == ROUTE
    assert call.headers["authorization"] == f"Bearer {SECRET}"
    assert sent["model"] == "gpt-test"
    assert sent["store"] is False
    assert sent["tool_choice"] == {"type": "function", "name": SUMMARY_TOOL}
    assert "item_0" in json.dumps(sent["input"])
    first = bodies[summarized[0]]["input"]
    assert first[0] == loop.items[0]  # the developer message, as sent
    assert FIELDS["current_state"] in json.dumps(first[1])
    assert all(intact(b["input"]) for b in bodies)
    written = {json.dumps(b["input"][1]) for b in bodies if is_responses_summary(b["input"][1])}
    assert len(written) <= len(dispatch.calls) <= 2 * len(written)
