"""The token-prediction grader (``benchmarks/token_prediction.py``): the anchored trivial
estimate, the new-token error and the regimes, and that the grader separates the
trivial estimate from ours where they differ."""

from __future__ import annotations

from benchmarks.token_prediction import Call, predict_run, provider_calls, summarize

from contextfold.message import Msg
from contextfold.token import OpenAITokenCounter

O200K = OpenAITokenCounter("o200k_base")


def _turns(n: int) -> list[Msg]:
    return [
        Msg("user", f"step {i}: " + "def parse_header(line): return line.split(':')\n" * 6, "user")
        for i in range(n)
    ]


def _requests(msgs: list[Msg], scale: float) -> list[tuple[list[Msg], tuple[()], int]]:
    """Growing requests whose "provider" counts ``scale`` times o200k."""
    return [
        (msgs[: k + 1], (), round(scale * O200K.count_request(msgs[: k + 1])))
        for k in range(len(msgs))
    ]


def test_the_anchored_estimate_adds_the_new_messages_to_the_last_reported_count() -> None:
    msgs = _turns(3)
    calls = predict_run(_requests(msgs, 1.5))
    first, second, third = calls
    assert [c.regime for c in calls] == ["call 1", "call 2", "calls 3+"]
    assert first.predicted["anchored o200k"] == O200K.count_request(msgs[:1])  # no anchor yet
    assert second.previous == first.truth
    assert second.predicted["anchored o200k"] == first.truth + O200K.count_message(msgs[1])
    assert third.predicted["o200k"] == O200K.count_request(msgs)


def test_after_a_compaction_the_anchored_estimate_takes_out_what_left() -> None:
    msgs = _turns(4)
    summary = Msg("user", "summary: parse_header splits on colons", "user")
    requests = [(msgs[:3], (), 300), ([summary, msgs[3]], (), 120)]
    after = predict_run(requests, compacted=[False, True])[1]
    assert after.regime == "after compaction"
    left = sum(O200K.count_message(m) for m in msgs[:3])
    added = O200K.count_message(summary) + O200K.count_message(msgs[3])
    assert after.predicted["anchored o200k"] == 300 - left + added


def test_the_new_token_error_separates_a_learned_ratio_from_the_plain_anchor() -> None:
    """A provider counting 1.5x o200k: on the whole prompt both anchored estimates look
    close; on the new tokens the plain anchor errs by a third and ours, once its ratio
    is learned, by almost nothing."""
    calls = predict_run(_requests(_turns(12), 1.5))
    ours = summarize(calls, "ours", "calls 3+")
    plain = summarize(calls, "anchored o200k", "calls 3+")
    assert plain["new"][0] > 0.3
    assert ours["new"][0] < 0.02
    assert plain["whole"][0] < 0.1  # the whole-prompt error hides most of it


def test_the_new_token_error_divides_by_the_growth_and_skips_calls_that_did_not_grow() -> None:
    calls = [
        Call("calls 3+", truth=1100, previous=1000, predicted={"x": 1110}),
        Call("calls 3+", truth=1100, previous=1100, predicted={"x": 1100}),
    ]
    s = summarize(calls, "x", "calls 3+")
    assert s["new"][:2] == (0.1, 0.1)
    assert s["new"][2] == 1


def test_on_recorded_runs_ours_errs_less_than_the_anchored_estimate_on_new_tokens() -> None:
    calls = provider_calls(6)
    ours = summarize(calls, "ours", "calls 3+")
    anchored = summarize(calls, "anchored o200k", "calls 3+")
    assert ours["calls"] > 100
    assert anchored["new"][0] - ours["new"][0] >= 0.03
