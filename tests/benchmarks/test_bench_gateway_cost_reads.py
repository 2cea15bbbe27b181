"""The read-back cost figure (``benchmarks/gateway_cost_reads.py``) on a small synthetic
session: each long result is read back in one extra round, the round re-reads the
previous request from the cache, and the rows keep their order."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="needs contextfold[gateway]")

from benchmarks.fig_cache_validation import RecordedCall, Session
from benchmarks.gateway_cost_reads import run_session

from contextfold.gateway import TransparentPolicy
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, Usage
from contextfold.token import AnthropicEstimator


def _session(steps: int = 5) -> Session:
    history: list[Msg] = [Msg("user", "Find the bug. " * 300, "user")]
    calls = []
    for k in range(steps):
        calls.append(RecordedCall(list(history), at=20.0 * k, input_tokens=0, cache_read=0))
        history.append(
            Msg(
                "assistant",
                [ToolCallBlock(id=f"t{k}", name="bash", input={"cmd": f"grep -rn x{k}"})],
                "assistant",
                usage=Usage(input_tokens=0, output_tokens=10),
            )
        )
        output = "\n".join(f"src/m{k}_{i}.py:{i}: x{k}_{i} = f({i})" for i in range(300))
        history.append(
            Msg("user", [ToolResultBlock(id=f"t{k}", name="bash", output=output)], "user")
        )
    calls.append(RecordedCall(list(history), at=20.0 * steps, input_tokens=0, cache_read=0))
    history.append(Msg("assistant", [TextBlock(text="Done.")], "assistant"))
    return Session("synthetic", "claude-code", None, calls)


def test_each_cut_result_costs_one_round_that_reads_the_previous_request_from_the_cache() -> None:
    counter = AnthropicEstimator()
    policy = TransparentPolicy(window=1_000_000, tool_result_limit=400)
    result = run_session(_session(), policy, counter)
    assert result.cut == 5
    assert result.rounds == 5  # once each, in the turn it arrives
    extra = result.read.input - result.unread.input
    assert extra > 0
    assert result.read.read - result.unread.read > 0.8 * extra  # mostly cache reads
    assert result.read.dollars > result.unread.dollars
    # The tool's definition costs a little; cutting saves more than it costs.
    assert result.truncated.dollars <= result.unread.dollars < result.direct.dollars
