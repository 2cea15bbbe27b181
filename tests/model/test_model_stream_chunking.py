"""However a provider splits its stream, the assembled answer equals the whole answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from contextfold.message import Msg
from contextfold.model import (
    AnthropicChatModel,
    ChatModelBase,
    OpenAIChatModel,
    ResponseCompleted,
    TextDelta,
    ToolCallDelta,
)

from .model_fakes import FakeAnthropic, FakeOpenAI, FakeProvider
from .model_scenarios import SECRET_KEY, WEATHER, Reply

ASK = [Msg("user", "Go.", "user")]

replies = st.builds(
    Reply,
    text=st.text(min_size=1, max_size=60),
    tool_calls=st.lists(
        st.dictionaries(st.text(min_size=1, max_size=8), st.integers() | st.text(max_size=10)),
        max_size=3,
    ).map(
        lambda inputs: tuple(
            (f"call_{i}", "get_weather", json.dumps(args, ensure_ascii=False))
            for i, args in enumerate(inputs)
        )
    ),
)
pieces = st.integers(min_value=1, max_value=16)
quick = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model(fake: FakeProvider) -> ChatModelBase:
    if isinstance(fake, FakeOpenAI):
        return OpenAIChatModel("gpt-4o", api_key=SECRET_KEY, http_client=fake.client())
    return AnthropicChatModel("claude-sonnet-5", api_key=SECRET_KEY, http_client=fake.client())


async def _check(fake: FakeProvider, reply: Reply) -> None:
    model = _model(fake)
    whole = await model.generate(ASK, tools=[WEATHER])
    events: list[Any] = [e async for e in model.stream(ASK, tools=[WEATHER])]
    final = events[-1]
    assert isinstance(final, ResponseCompleted)
    assert final.response.content == whole.content
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == reply.text
    for slot, (_, _, arguments) in enumerate(reply.tool_calls):
        parts = [e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == slot]
        assert json.loads("".join(parts)) == json.loads(arguments)


@quick
@given(reply=replies, piece=pieces)
async def test_openai_stream_assembles_to_the_whole_answer(reply: Reply, piece: int) -> None:
    await _check(FakeOpenAI([reply, reply], piece=piece), reply)


@quick
@given(reply=replies, piece=pieces)
async def test_anthropic_stream_assembles_to_the_whole_answer(reply: Reply, piece: int) -> None:
    await _check(FakeAnthropic([reply, reply], piece=piece), reply)
