"""The Claude estimator errs high; the calibrated counter corrects it with reported usage."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.message import Msg, ToolCallBlock, ToolResultBlock, ToolSpec, Usage
from contextfold.token import AnthropicEstimator, CalibratedCounter, TokenCounter

from .token_helpers import reference_count

TOOLS = [ToolSpec(name="bash", description="Run a command")]


def _history(n: int) -> list[Msg]:
    out: list[Msg] = []
    for i in range(n):
        call = ToolCallBlock(id=f"t{i}", name="bash", input={"command": f"ls dir{i}"})
        out.append(Msg("agent", [call], "assistant"))
        out.append(Msg("user", [ToolResultBlock(id=f"t{i}", name="bash", output="a\nb\n")], "user"))
    return out


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_estimate_is_never_below_the_o200k_count(text: str) -> None:
    assert AnthropicEstimator().count_text(text) >= reference_count("o200k_base", text)


def test_estimator_is_not_exact_and_satisfies_the_counter_protocol() -> None:
    estimator = AnthropicEstimator()
    assert isinstance(estimator, TokenCounter)
    assert estimator.exact is False


def test_estimator_request_is_the_sum_of_its_parts() -> None:
    est = AnthropicEstimator()
    msgs = _history(3)
    parts = sum(est.count_message(m) for m in msgs) + est.count_tools(TOOLS)
    assert est.count_request(msgs, TOOLS) == parts + est.count_request([], ())


def test_calibrated_count_is_reported_plus_estimate_of_what_was_added() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    system = Msg("system", "You are terse.", "system")
    sent = [system, *_history(5)]
    counter.observe(sent, TOOLS, Usage(input_tokens=700))
    added = _history(1)
    rebuilt = Msg("system", "You are terse.", "system")  # the engine rebuilds it per step
    now = [rebuilt, *sent[1:], *added]
    expected = 700 + sum(counter.count_message(m) for m in added)
    assert counter.calibrated_request(now, TOOLS) == expected


def test_calibrated_count_of_the_observed_request_is_what_was_reported() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    sent = _history(4)
    counter.observe(sent, TOOLS, 512)
    assert counter.calibrated_request(sent, TOOLS) == 512


def test_request_that_does_not_extend_the_observed_one_gets_the_plain_estimate() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    sent = _history(6)
    counter.observe(sent, TOOLS, 300)
    compressed = sent[4:]
    assert counter.calibrated_request(compressed, TOOLS) == counter.count_request(compressed, TOOLS)


def test_changed_tools_fall_back_to_the_plain_estimate() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    sent = _history(2)
    counter.observe(sent, TOOLS, 300)
    assert counter.correction(sent, []) == 0


def test_zero_reported_usage_is_ignored() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    sent = _history(2)
    counter.observe(sent, TOOLS, Usage())
    assert counter.correction(sent, TOOLS) == 0


def test_calibrated_counter_keeps_the_inner_identity() -> None:
    counter = CalibratedCounter(AnthropicEstimator())
    msgs = _history(3)
    counter.observe(msgs, TOOLS, 50)
    parts = sum(counter.count_message(m) for m in msgs) + counter.count_tools(TOOLS)
    assert counter.count_request(msgs, TOOLS) == parts + counter.count_request([], ())


class _Undercounting:
    """An estimator that counts half of what the provider counts (o200k against a
    smaller vocabulary errs this way)."""

    name = "half"
    exact = False

    def __init__(self) -> None:
        self.inner = AnthropicEstimator()

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text) // 2

    def count_message(self, msg: Msg) -> int:
        return self.inner.count_message(msg) // 2

    def count_tools(self, tools: list[ToolSpec]) -> int:  # type: ignore[override]
        return self.inner.count_tools(tools) // 2

    def count_request(self, messages: list[Msg], tools: list[ToolSpec] = ()) -> int:  # type: ignore[assignment]
        return sum(self.count_message(m) for m in messages) + self.count_tools(tools)


def test_a_request_after_a_compaction_is_scaled_by_what_the_provider_counted() -> None:
    """After a compaction the request no longer extends the observed one; an estimator
    that undercounts (the provider reported twice its estimate) is scaled up by the last
    whole-request ratio rather than trusted as it is (20% median error on the first
    request after a compaction in benchmarks.token_prediction before)."""
    counter = CalibratedCounter(_Undercounting())  # type: ignore[arg-type]
    sent = _history(6)
    estimate = counter.count_request(sent, TOOLS)
    counter.observe(sent, TOOLS, 2 * estimate)
    compressed = sent[4:]
    plain = counter.count_request(compressed, TOOLS)
    assert counter.calibrated_request(compressed, TOOLS) == 2 * plain


def test_an_overcounting_estimator_is_never_scaled_down_after_a_compaction() -> None:
    """The Claude estimator errs high by design (it never undercounts): a request that
    does not extend the observed one keeps that guarantee."""
    counter = CalibratedCounter(AnthropicEstimator())
    sent = _history(6)
    counter.observe(sent, TOOLS, counter.count_request(sent, TOOLS) // 2)
    compressed = sent[4:]
    assert counter.correction(compressed, TOOLS) == 0
