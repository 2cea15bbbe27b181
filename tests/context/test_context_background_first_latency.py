"""The first background summary, timed on the summarizer's own measure of its latency
(issue 30): before any summary ran, the engine had only ``assumed_latency_s`` (10 s), and
the embedded model's first summary took 155-178 s, all of it waited for.

On the replay's simulated clock (each step a second, about 100 tokens), as the tests of
``test_context_background_latency``.
"""

from __future__ import annotations

import asyncio

import pytest

from contextfold.context import (
    BackgroundConfig,
    ContextConfig,
    ContextEvent,
    MeasuresLatency,
    ModelSummarizer,
    Prefetch,
    SummaryLatencyModel,
    SummaryRequest,
)
from contextfold.message import SUMMARY_TOOL, ToolSpec
from contextfold.model import ModelSpeed, ScriptedModel
from contextfold.replay import SimulatedClock

from .ctx_support import user
from .test_context_background_latency import SIZE, TimedSummarizer, engine_on, steps, waits


class MeasuringSummarizer(TimedSummarizer):
    """Summaries of ``seconds`` each, and a measure of that latency when asked."""

    def __init__(self, clock: SimulatedClock, seconds: float, measured: float | None) -> None:
        super().__init__(clock, lambda n: seconds)
        self.measured = measured
        self.asked: list[tuple[int, int]] = []  # (messages in the sample, its tokens)

    async def measure_latency(
        self, sample: SummaryRequest, tokens: int
    ) -> SummaryLatencyModel | None:
        self.asked.append((len(sample.messages), tokens))
        assert sample.prefix is not None
        assert sample.prefix.usage.total > tokens
        if self.measured is None:
            raise RuntimeError("the model could not load")
        # Read nothing, write as many tokens as seconds at one a second: ``measured`` s.
        speed = ModelSpeed(prompt_tokens_per_s=1.0, output_tokens_per_s=1.0)
        written = round(self.measured)
        return SummaryLatencyModel(speed, fixed_tokens=0, per_token=0.0, written=written)


async def first_wait(summarizer: TimedSummarizer) -> float:
    clock = summarizer.clock
    clock.main = asyncio.current_task()
    events: list[ContextEvent] = []
    engine = engine_on(clock, summarizer, events)
    engine.append(user("Read every log."))
    await steps(engine, clock, 0, 150)
    found = waits(events)
    assert found, "a prepared summary was swapped in"
    return found[0]


async def test_the_first_summary_is_started_on_the_summarizers_measured_latency() -> None:
    # Summaries take 60 s. Timed on the assumed 10 s, the first starts ~1,350 tokens
    # before the wait mark and the agent waits ~45 s for it (before this change, with or
    # without a measure: the engine never asked). Told 60 s by the summarizer, it starts
    # 1.25 x 60 s of growth before the mark and is ready in time.
    clock = SimulatedClock()
    summarizer = MeasuringSummarizer(clock, 60.0, measured=60.0)
    assert isinstance(summarizer, MeasuresLatency)
    assert await first_wait(summarizer) == 0.0
    assert len(summarizer.asked) == 1  # asked once
    messages, tokens = summarizer.asked[0]
    assert messages >= 3
    assert tokens > 0


async def test_without_a_measure_the_first_summary_is_timed_on_the_assumed_latency() -> None:
    # The same summarizer, its measure failing (a model that cannot load): the assumed
    # 10 s as before, so the first summary is waited for; the failure loses nothing.
    clock = SimulatedClock()
    summarizer = MeasuringSummarizer(clock, 60.0, measured=None)
    assert await first_wait(summarizer) > 30.0
    assert len(summarizer.asked) == 1  # not asked again every step


def test_a_measured_latency_is_used_until_a_summary_is_timed() -> None:
    prefetch: Prefetch[object] = Prefetch(lambda e: asyncio.sleep(0))
    config = ContextConfig(background=BackgroundConfig(assumed_latency_s=10.0))
    assert prefetch.expected_latency(2000, config) == 10.0
    speed = ModelSpeed(prompt_tokens_per_s=100.0, output_tokens_per_s=1.0)
    prefetch.latency_model = SummaryLatencyModel(speed, fixed_tokens=0, per_token=1.0, written=20)
    assert prefetch.expected_latency(2000, config) == 40.0  # 2,000 read at 100/s, 20 written
    prefetch.note_latency(30.0, 2000)  # one timed: what was measured on a real summary wins
    assert prefetch.expected_latency(2000, config) == 30.0
    assert prefetch.expected_latency(1000, ContextConfig()) is None  # no background


def test_a_token_deep_in_the_context_takes_longer() -> None:
    flat = ModelSpeed(prompt_tokens_per_s=100.0, output_tokens_per_s=10.0)
    assert flat.seconds(2000, 0) == 2 * flat.seconds(1000, 0)
    assert flat.seconds(1000, 100) == 10.0 + 10.0
    deep = ModelSpeed(prompt_tokens_per_s=100.0, output_tokens_per_s=10.0, depth_cost=1e-3)
    # Token p costs (1 + 0.001 p) of the first: 1,000 tokens average 1.4995 of it.
    assert deep.seconds(1000, 0) == pytest.approx(10.0 * 1.4995)
    assert deep.seconds(2000, 0) > 2 * deep.seconds(1000, 0)  # faster than the input grows
    # Written after 1,000 read: each written token is twice as slow, and more.
    assert deep.seconds(1000, 100) - deep.seconds(1000, 0) == pytest.approx(10.0 * 2.0495)


def test_a_latency_model_rejects_what_is_not_a_duration() -> None:
    speed = ModelSpeed(prompt_tokens_per_s=1.0, output_tokens_per_s=1.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and non-negative"):
            SummaryLatencyModel(speed, fixed_tokens=0, per_token=bad, written=0)
        with pytest.raises(ValueError, match="finite and non-negative"):
            ModelSpeed(prompt_tokens_per_s=1.0, output_tokens_per_s=1.0, depth_cost=bad)
    with pytest.raises(ValueError, match="non-negative"):
        SummaryLatencyModel(speed, fixed_tokens=-1, per_token=1.0, written=0)
    with pytest.raises(ValueError, match="positive"):
        ModelSpeed(prompt_tokens_per_s=0.0, output_tokens_per_s=10.0)


class MeasuredModel(ScriptedModel):
    """A scripted model that says how fast it is, as ``LocalChatModel`` measures it."""

    max_tokens = 400

    async def measure_speed(self) -> ModelSpeed:
        return ModelSpeed(prompt_tokens_per_s=50.0, output_tokens_per_s=10.0)


async def test_a_model_summarizer_turns_its_models_speed_into_a_latency() -> None:
    model = MeasuredModel([], context_size=SIZE)
    messages = [user("log 1 line 0: GET /api/v0/items status 500")] * 4
    tokens = sum(model.token_counter.count_message(m) for m in messages)
    config = ContextConfig()
    sample = SummaryRequest(
        messages=messages,
        previous=None,
        instructions=config.compression_prompt,
        hints=(),
        schema=config.summary_schema,
    )
    summarizer = ModelSummarizer(model)
    measured = await summarizer.measure_latency(sample, tokens)
    assert measured is not None
    # Read: the instructions, the schema and the framing (what this summarizer sends,
    # less the messages), plus the messages; written: the model's 400 tokens at most.
    prompt = summarizer.prompt(sample)
    assert prompt.offered is None  # no prefix: the transcript form, its tool forced
    counter = model.token_counter
    tool = ToolSpec(name=SUMMARY_TOOL, parameters=config.summary_schema)
    whole = counter.count_request(prompt.messages, [tool])
    assert measured.fixed_tokens == whole - tokens
    assert measured.fixed_tokens > 200  # the instructions and the schema are not small
    assert measured.per_token == 1.0  # the engine counts as the model does here
    assert measured.written == 400
    assert measured.seconds(1000) == pytest.approx((measured.fixed_tokens + 1000) / 50 + 40.0)
    # The engine counting the messages half as many tokens as the model: twice each.
    halved = await summarizer.measure_latency(sample, tokens // 2)
    assert halved is not None
    assert halved.per_token == pytest.approx(2 * measured.per_token, rel=0.01)
    # A model that cannot measure itself (a provider's: it would be a paid call): None.
    plain = ScriptedModel([], context_size=SIZE)
    assert await ModelSummarizer(plain).measure_latency(sample, tokens) is None
