"""With a counter that has no tokenizer, the engine's usage follows reported usage."""

from __future__ import annotations

from contextfold.context import ContextEngine, ModelSummarizer
from contextfold.message import Msg, Usage
from contextfold.model import ScriptedModel
from contextfold.token import AnthropicEstimator, CalibratedCounter


async def test_usage_is_reported_tokens_plus_the_estimate_of_what_was_added() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    model = ScriptedModel(context_size=100_000, token_counter=counter)
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(model),
        session_id="s",
    )
    engine.append(Msg("user", "first question " * 20, "user"))
    sent = await engine.prepare("You are helpful.", [])
    counter.observe(sent.messages(), [], Usage(input_tokens=123))
    added = Msg("a", "an answer " * 10, "assistant")
    engine.append(added)
    nxt = await engine.prepare("You are helpful.", [])
    assert nxt.usage.total == 123 + counter.count_message(added)


async def test_without_an_observation_usage_is_the_plain_estimate() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    model = ScriptedModel(context_size=100_000, token_counter=counter)
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(model),
        session_id="s",
    )
    engine.append(Msg("user", "a question", "user"))
    sent = await engine.prepare("You are helpful.", [])
    assert sent.usage.total == counter.count_request(sent.messages(), [])
