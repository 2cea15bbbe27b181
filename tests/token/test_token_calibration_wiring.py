"""A model whose counter has no tokenizer learns from the usage the provider reports."""

from __future__ import annotations

from contextfold.message import HintBlock, Msg, Usage
from contextfold.model import ChatResponse, ScriptedModel, text_reply
from contextfold.token import AnthropicEstimator, CalibratedCounter


def _reply_with_usage(input_tokens: int) -> ChatResponse:
    response = text_reply("ok")
    response.usage = Usage(input_tokens=input_tokens, output_tokens=1)
    return response


async def test_generate_feeds_reported_usage_to_a_calibrated_counter() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    model = ScriptedModel([_reply_with_usage(1000)], token_counter=counter)
    history = [Msg("user", "hello there", "user")]
    await model.generate(history)
    extended = [*history, Msg("a", "ok", "assistant"), Msg("user", "more", "user")]
    assert counter.correction(extended) == 1000 - counter.count_request(history)
    assert counter.calibrated_request(extended) == 1000 + (
        counter.count_request(extended) - counter.count_request(history)
    )


async def test_stream_feeds_reported_usage_to_a_calibrated_counter() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    model = ScriptedModel([_reply_with_usage(777)], token_counter=counter)
    history = [Msg("user", "hello there", "user")]
    async for _ in model.stream(history):
        pass
    assert counter.calibrated_request(history) == 777


def test_a_trailing_usage_hint_is_not_part_of_the_observed_prefix() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    history = [Msg("user", "hello there", "user"), Msg("a", "ok", "assistant")]
    hint = Msg(
        "runtime", [HintBlock(hint="70% used")], "user", metadata={"contextfold": "usage_hint"}
    )
    counter.observe([*history, hint], (), Usage(input_tokens=500))
    # The next request extends the stored history, not the hint that was sent after it.
    nxt = [*history, Msg("user", "next", "user")]
    assert counter.correction(nxt) == 500 - counter.count_request([*history, hint])
