"""LocalChatModel measures its own speed on this machine (issue 30: the background
compaction times the first summary on it, not on a constant)."""

from __future__ import annotations

from contextfold.context import ModelSummarizer
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
    assert response.usage is not None and response.usage.output_tokens > 0


async def test_a_summarizer_over_the_embedded_model_has_a_latency_before_any_summary(
    local_model: LocalChatModel,
) -> None:
    sample = [Msg("user", "log 3 line 7: GET /api/v1/items status 500", "user")] * 5
    tokens = sum(local_model.token_counter.count_message(m) for m in sample)
    measured = await ModelSummarizer(local_model).measure_latency(sample, tokens)
    assert measured is not None
    speed = await local_model.measure_speed()
    # Writing max_tokens (24 in this fixture) at the output rate, reading at the prompt's.
    assert measured.fixed_s == 24 / speed.output_tokens_per_s
    assert measured.per_token_s == 1 / speed.prompt_tokens_per_s
