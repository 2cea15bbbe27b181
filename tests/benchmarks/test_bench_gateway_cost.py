"""The gateway cost figure's own rules: the Codex requests rebuilt from a rollout, OpenAI's
grader on them, the best share within a window, and the peer's configuration."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from benchmarks.fig_cache_validation import RecordedCall, Session
from benchmarks.gateway_cost import best_share, count_compactions, direct_bodies, price
from benchmarks.gateway_cost_codex import (
    codex_calls,
    drop_oldest,
    responses_blocks,
    through_gateway,
)
from benchmarks.gateway_cost_codex import direct_bodies as codex_bodies
from benchmarks.gateway_cost_codex import price as openai_price
from benchmarks.gateway_cost_litellm import _config

from contextfold.gateway import CountCache
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, Usage
from contextfold.token import AnthropicEstimator, counter_for_model

DATA = Path(__file__).resolve().parents[2] / "data" / "trajectories"
TRACELAB = next((DATA / "codex-tracelab").glob("rollout-*.jsonl"))


def test_a_rollout_becomes_the_requests_codex_sent_each_extending_the_one_before() -> None:
    _, instructions, calls = codex_calls(TRACELAB)
    assert len(calls) == 9  # its nine distinct token_count events
    assert instructions.startswith("You are Codex")
    for before, after in itertools.pairwise(calls):
        # a call's input is the previous input, its answer, then the tool outputs
        assert after.input[: len(before.input)] == before.input
        assert after.input[len(before.input) : len(before.input) + len(before.output)] == (
            before.output
        )
    assert all(c.model == "gpt-5.4" for c in calls)
    assert max(c.input_tokens for c in calls) == 12_097


def test_the_stand_in_tool_makes_the_first_request_the_size_it_was_recorded() -> None:
    counter = counter_for_model("gpt-5")
    session, instructions, calls = codex_calls(TRACELAB)
    bodies = codex_bodies(session, instructions, calls, counter)
    first = sum(b.tokens for b in responses_blocks(bodies[0], counter))
    assert abs(first - calls[0].input_tokens) < 0.01 * calls[0].input_tokens


def test_openai_grader_reads_the_previous_prefix_in_128_token_steps_and_charges_no_write() -> None:
    counter = counter_for_model("gpt-5")
    session, instructions, calls = codex_calls(TRACELAB)
    bodies = codex_bodies(session, instructions, calls, counter)[:2]
    priced = openai_price(bodies, [0.0, 10.0], [0, 0], "gpt-5.4", counter)
    first = sum(b.tokens for b in responses_blocks(bodies[0], counter))
    assert priced.read <= first
    assert (priced.read - 1024) % 128 == 0
    assert priced.read > first - 128 - 8  # the whole first request, to the step below
    # no write price: uncached input at $2.50, cached at $0.25 per million
    assert abs(priced.dollars - (priced.uncached * 2.5 + priced.read * 0.25) / 1e6) < 1e-12
    late = openai_price(bodies, [0.0, 10_000.0], [0, 0], "gpt-5.4", counter)
    assert late.read == 0  # expired after five minutes without use


def test_codex_requests_without_context_management_cross_the_gateway_byte_for_byte() -> None:
    counter = counter_for_model("gpt-5")
    session, instructions, calls = codex_calls(TRACELAB)
    bodies = codex_bodies(session, instructions, calls, counter)[:3]
    received, compactions = through_gateway(calls[:3], bodies, None)
    assert compactions == 0
    assert received == [json.dumps(b, ensure_ascii=False).encode() for b in bodies]


def test_codex_drop_oldest_fits_the_window_and_never_starts_on_a_tool_output() -> None:
    counter = counter_for_model("gpt-5")
    session, instructions, calls = codex_calls(TRACELAB)
    body = codex_bodies(session, instructions, calls, counter)[-1]
    total = sum(b.tokens for b in responses_blocks(body, counter))
    cut = drop_oldest(body, total - 500, counter)
    kept = cut["input"][1:]
    assert kept == body["input"][len(body["input"]) - len(kept) :]
    assert not str(kept[0].get("type", "")).endswith("_output")
    assert sum(b.tokens for b in responses_blocks(cut, counter)) <= total - 500


def _session() -> Session:
    history: list[Msg] = [Msg("user", "Fix the failing test. " * 200, "user")]
    calls = []
    for k in range(8):
        calls.append(RecordedCall(list(history), at=10.0 * k, input_tokens=0, cache_read=0))
        history.append(
            Msg(
                "assistant",
                [ToolCallBlock(id=f"t{k}", name="bash", input={"cmd": f"step {k}"})],
                "assistant",
                usage=Usage(input_tokens=0, output_tokens=10),
            )
        )
        history.append(
            Msg("user", [ToolResultBlock(id=f"t{k}", name="bash", output="ok " * 900)], "user")
        )
    history.append(Msg("assistant", [TextBlock(text="Done.")], "assistant"))
    return Session("synthetic", "claude-code", None, calls)


def test_the_best_share_within_a_window_bounds_direct_and_falls_as_the_window_shrinks() -> None:
    counter = AnthropicEstimator()
    session = _session()
    bodies = direct_bodies(session, counter)
    times = [c.at for c in session.calls]
    direct = price(bodies, times, [10] * len(bodies), counter)
    wide = best_share(bodies, times, 10**9, counter, CountCache())
    assert wide >= direct.read_share - 1e-9
    assert abs(wide - direct.ceiling) < 1e-9  # no window, no expiry: the perfect cache
    narrow = best_share(bodies, times, 6_000, counter, CountCache())
    assert narrow < wide  # same new content over shorter requests


def test_the_peer_is_litellm_prompt_compression_with_the_gateway_trigger() -> None:
    config = _config("http://127.0.0.1:1", 80_000, "sk-test")
    assert config["litellm_settings"]["callbacks"] == ["compression_interception"]
    params = config["litellm_settings"]["compression_interception_params"]
    assert params["compression_trigger"] == 80_000
    (model,) = config["model_list"]
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:1"


def test_two_compactions_whose_summaries_start_alike_count_as_two() -> None:
    def body(first: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": first}]}]}

    prefix = "This conversation continues from an earlier part that was compacted. Summary:"
    bodies = [body("Fix it."), body(prefix + " one"), body(prefix + " one"), body(prefix + " two")]
    assert count_compactions(bodies) == 2
