"""Any JSON a client sends as ``messages`` gets the edits or a clear error, never a crash:
the edits run on shapes the upstream may reject, which it then answers itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.context import ExtractiveSummarizer
from contextfold.gateway import EditError, apply_context_management, compact
from contextfold.token import AnthropicEstimator

SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=300)
BLOCK_TYPES = st.sampled_from(
    ["text", "tool_use", "tool_result", "thinking", "redacted_thinking", "compaction", "image", "x"]
)
BLOCKS = st.fixed_dictionaries(
    {"type": BLOCK_TYPES},
    optional={
        "id": st.sampled_from(["a", "b"]) | SCALARS,
        "tool_use_id": st.sampled_from(["a", "b"]) | SCALARS,
        "name": st.sampled_from(["bash", "read"]) | SCALARS,
        "input": st.dictionaries(st.text(max_size=3), SCALARS, max_size=2) | SCALARS,
        "content": SCALARS
        | st.lists(st.dictionaries(st.text(max_size=4), SCALARS, max_size=2), max_size=2),
        "text": SCALARS,
        "thinking": SCALARS,
    },
)
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]) | SCALARS},
        optional={"content": SCALARS | st.lists(BLOCKS | SCALARS, max_size=4)},
    )
    | SCALARS,
    max_size=8,
)
EDITS: list[dict[str, Any]] = [
    {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}},
    {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 0},
        "keep": {"type": "tool_uses", "value": 0},
        "clear_tool_inputs": True,
    },
    {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 0}},
]


@settings(max_examples=300, deadline=None)
@given(messages=MESSAGES, system=SCALARS | st.lists(BLOCKS, max_size=2))
def test_any_messages_get_the_edits_without_a_crash(messages: Any, system: Any) -> None:
    body = {
        "model": "m",
        "system": system,
        "messages": messages,
        "context_management": {"edits": EDITS},
    }
    try:
        outcome = apply_context_management(body, AnthropicEstimator())
    except EditError:
        return
    assert outcome.input_tokens >= 0
    if outcome.compaction is not None:
        done = asyncio.run(compact(outcome.compaction, ExtractiveSummarizer()))
        assert done.block["type"] == "compaction"


def test_edits_that_fail_are_not_applied_and_not_claimed_and_are_counted(
    upstream: Any,
) -> None:
    import anthropic
    import httpx

    from contextfold.gateway import GatewayConfig, create_app

    from .conftest import SECRET
    from .history import tool_history
    from .servers import message, serving

    class Broken(AnthropicEstimator):
        def count_message(self, msg: Any) -> int:
            raise RuntimeError("counter down")

    upstream.then_json(message("fine"))
    history = tool_history(4)
    edits: Any = {"edits": [{"type": "clear_tool_uses_20250919"}]}  # needs a count
    with serving(create_app(GatewayConfig(upstream=upstream.url), counter=Broken())) as url:
        client = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
        answer = client.beta.messages.create(
            model="m",
            max_tokens=5,
            messages=history,  # type: ignore[arg-type]
            context_management=edits,
            betas=["context-management-2025-06-27"],
        )
        metrics = httpx.get(f"{url}/metrics").text
    sent = upstream.received[0]
    assert sent.json()["messages"] == history
    assert "context_management" not in sent.json()
    assert "anthropic-beta" not in sent.headers
    assert answer.context_management is None  # no applied_edits claimed
    assert "contextfold_gateway_untransformed_total 1" in metrics.splitlines()


def test_with_fail_closed_a_request_the_edits_cannot_handle_is_refused_not_forwarded(
    upstream: Any,
) -> None:
    import anthropic
    import httpx

    from contextfold.gateway import GatewayConfig, create_app

    from .conftest import SECRET
    from .history import tool_history
    from .servers import serving

    class Broken(AnthropicEstimator):
        def count_message(self, msg: Any) -> int:
            raise RuntimeError("counter down: secret request text")

    edits: Any = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    config = GatewayConfig(upstream=upstream.url, fail_closed=True)
    with serving(create_app(config, counter=Broken())) as url:
        client = anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0)
        with pytest.raises(anthropic.InternalServerError) as raised:
            client.beta.messages.create(
                model="m",
                max_tokens=5,
                messages=tool_history(4),  # type: ignore[arg-type]
                context_management=edits,
                betas=["context-management-2025-06-27"],
            )
        metrics = httpx.get(f"{url}/metrics").text
    assert upstream.received == []
    message = raised.value.body["error"]["message"]  # type: ignore[index]
    assert "RuntimeError" in message
    assert "secret request text" not in message  # the type only, never the text
    assert "contextfold_gateway_untransformed_total 1" in metrics.splitlines()
