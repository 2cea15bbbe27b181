"""LocalChatModel measures its own speed on this machine (issue 30: the background
compaction times the first summary on it, not on a constant)."""

from __future__ import annotations

import pytest

from contextfold.context import ContextConfig, ModelSummarizer, SummaryRequest
from contextfold.message import Msg
from contextfold.model import LocalChatModel


async def test_the_speed_is_measured_once_without_counting_as_a_call(
    local_model: LocalChatModel,
) -> None:
    before = local_model.kv_cache
    speed = await local_model.measure_speed()
    # Rates, not a constant: positive, and below what a CPU could ever do (a cached
    # prompt would read at "a million tokens a second").
    assert 0 < speed.prompt_tokens_per_s < 100_000
    assert 0 < speed.output_tokens_per_s < 10_000
    assert await local_model.measure_speed() is speed  # kept, not measured again
    assert local_model.kv_cache == before  # not one of the caller's calls
    # The model still answers afterwards.
    response = await local_model.generate([Msg("user", "Say hi.", "user")])
    assert response.usage is not None
    assert response.usage.output_tokens > 0


async def test_a_summarizer_over_the_embedded_model_has_a_latency_before_any_summary(
    local_model: LocalChatModel,
) -> None:
    messages = [Msg("user", "log 3 line 7: GET /api/v1/items status 500", "user")] * 5
    tokens = sum(local_model.token_counter.count_message(m) for m in messages)
    config = ContextConfig()
    sample = SummaryRequest(
        messages=messages,
        previous=None,
        instructions=config.compression_prompt,
        hints=(),
        schema=config.summary_schema,
    )
    measured = await ModelSummarizer(local_model).measure_latency(sample, tokens)
    assert measured is not None
    speed = await local_model.measure_speed()
    assert measured.speed == speed
    assert measured.written == 24  # this fixture's max_tokens
    assert measured.fixed_tokens > 100  # the instructions and the schema, read too
    assert measured.per_token == 1.0  # the same tokenizer as the engine's count here
    # Attention: a token deeper in the context costs more (SmolLM2-135M: 30 layers of 576
    # over 134.5 M weights).
    assert speed.depth_cost == pytest.approx(2 * 30 * 576 / 134_515_008, rel=0.01)
