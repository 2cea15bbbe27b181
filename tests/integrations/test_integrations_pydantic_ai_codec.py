"""The Pydantic AI codec: the summary's cache point as the framework sends it, and user
prompts holding cache points (the round trip of every codec: test_integrations_codec_summary)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")

from pydantic_ai.messages import CachePoint, ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from contextfold.context import SummaryLayer
from contextfold.integrations.pydantic_ai import PydanticAICodec

LAYER = SummaryLayer(parts=("first part", "second part")).msg


def test_a_user_prompt_with_a_cache_point_folds() -> None:
    # A cache point is a marker, not an image or a file.
    prompt = ModelRequest(parts=[UserPromptPart(content=["Fix the parser.", CachePoint()])])
    ((msg, _),) = PydanticAICodec().to_msgs([prompt])
    assert msg.text == "Fix the parser."


async def test_anthropic_gets_the_parts_as_blocks_and_a_breakpoint_on_the_summarys_end() -> None:
    pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")
    import httpx2 as httpx  # the Anthropic SDK's HTTP client
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    sent: list[dict[str, Any]] = []

    def reply(request: Any) -> Any:
        sent.append(json.loads(request.content))
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        events = [
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "ok"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 1},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        stream = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=stream.encode()
        )

    client = AsyncAnthropic(
        api_key="test", http_client=httpx.AsyncClient(transport=httpx.MockTransport(reply))
    )
    model = AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=client))
    history = [
        *PydanticAICodec().from_msg(LAYER),
        ModelRequest(parts=[UserPromptPart(content="Go on.")]),
    ]
    await model.request(history, None, ModelRequestParameters())

    (body,) = sent
    first = body["messages"][0]
    texts = [b for b in first["content"] if b["type"] == "text"]
    assert [b["text"] for b in texts][:2] == ["first part", "second part"]
    assert texts[1].get("cache_control", {}).get("type") == "ephemeral"
    assert "cache_control" not in texts[0]
