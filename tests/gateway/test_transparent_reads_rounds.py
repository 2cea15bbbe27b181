"""A later read-back round whose whole answer the gateway cannot use (not the dialect's
shape, or not JSON in UTF-8): the client gets a provider-shaped 502 saying so, on every
route, through the official SDKs; the first round's odd answer is relayed as it came."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from starlette.responses import JSONResponse, Response

from .openai_reader import MODEL, then_chat_reader, then_responses_reader
from .reader import then_reader
from .reads_client import (
    CHAT_TOOLS,
    POLICY,
    RESPONSES_TOOLS,
    Agent,
    chat_history,
    gateway,
    responses_history,
)
from .servers import ScriptedUpstream
from .test_transparent import transparent_gateway

ODD: dict[str, Any] = {
    "not the shape": lambda _r, _g: JSONResponse({"unexpected": True}),
    "not UTF-8": lambda _r, _g: Response(b'{"id": "\xff\xfe"}', media_type="application/json"),
}


@pytest.mark.parametrize("odd", list(ODD))
def test_anthropic_later_round(upstream: ScriptedUpstream, odd: str) -> None:
    agent = Agent("Where is the needle defined?", "NEEDLE-O")
    agent.long_step()
    then_reader(upstream, 1)
    upstream.then(ODD[odd])
    with (
        transparent_gateway(upstream, POLICY) as url,
        pytest.raises(anthropic.APIStatusError) as caught,
    ):
        agent.send(url)
    assert caught.value.status_code == 502
    assert "not a message" in str(caught.value)
    assert len(upstream.received) == 2


@pytest.mark.parametrize("odd", list(ODD))
def test_chat_later_round(upstream: ScriptedUpstream, odd: str) -> None:
    then_chat_reader(upstream, 1)
    upstream.then(ODD[odd])
    with gateway(upstream) as client, pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=chat_history("NEEDLE-O"), tools=CHAT_TOOLS
        )
    assert caught.value.status_code == 502
    assert "not a completion" in str(caught.value)
    assert len(upstream.received) == 2


@pytest.mark.parametrize("odd", list(ODD))
def test_responses_later_round(upstream: ScriptedUpstream, odd: str) -> None:
    then_responses_reader(upstream, 1)
    upstream.then(ODD[odd])
    with gateway(upstream) as client, pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(
            model=MODEL, input=responses_history("NEEDLE-O"), tools=RESPONSES_TOOLS
        )
    assert caught.value.status_code == 502
    assert "not a response" in str(caught.value)
    assert len(upstream.received) == 2


def test_a_first_answer_of_another_shape_is_relayed_as_it_came(upstream: ScriptedUpstream) -> None:
    upstream.then(lambda _r, _g: JSONResponse({"unexpected": True}))
    with gateway(upstream) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=chat_history("NEEDLE-O"), tools=CHAT_TOOLS
        )
    assert raw.http_response.json() == {"unexpected": True}
