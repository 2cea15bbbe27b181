"""A model whose counter has no tokenizer learns from the usage the provider reports."""

from __future__ import annotations

from contextfold.message import HintBlock, Msg, Usage
from contextfold.model import ChatResponse, ScriptedModel, text_reply
from contextfold.token import AnthropicEstimator, CalibratedCounter, OpenAITokenCounter


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


def test_the_ratio_of_provider_to_estimated_growth_is_learned() -> None:
    counter = CalibratedCounter(OpenAITokenCounter())
    history: list[Msg] = [Msg("user", "task " * 50, "user")]
    truth = 1000  # the provider counts the added content at 1.25 estimated tokens
    counter.observe(history, (), Usage(input_tokens=truth))
    for i in range(6):
        added = [Msg("a", f"step {i} " * 40, "assistant"), Msg("user", "out " * 120, "user")]
        before = counter.count_request(history)
        history = [*history, *added]
        truth += round(1.25 * (counter.count_request(history) - before))
        predicted = counter.count_request(history) + counter.correction(history)
        if i >= 2:
            assert abs(predicted - truth) / truth < 0.01
        counter.observe(history, (), Usage(input_tokens=truth))
    assert abs(counter.ratio - 1.25) < 0.05


def test_without_learning_the_ratio_stays_one() -> None:
    counter = CalibratedCounter(OpenAITokenCounter(), learn_ratio=False)
    a = [Msg("user", "task " * 50, "user")]
    counter.observe(a, (), Usage(input_tokens=200))
    b = [*a, Msg("a", "more " * 100, "assistant")]
    counter.observe(b, (), Usage(input_tokens=400))
    assert counter.ratio == 1.0
