"""Figure 5: cost per run, with the provider's prompt cache modelled.

Both systems replay the 44 recorded SWE-bench runs with the same extractive summarizer
and ``tool_result_limit=3000``. Every call each one would send (reasoning steps and
summary calls) is built in the Anthropic Messages API wire form (ours by our adapter's
request builder, with its ``cache_control`` breakpoints; AgentScope's by its own
``AnthropicChatFormatter``, which places none), run through contextfold's Anthropic cache
simulator (``contextfold.replay``: breakpoints, 20-block lookback, 1,024-token
minimum, 5-minute lifetime) and priced at Claude Sonnet 4.5's published rates
(``contextfold/replay/pricing.json``). AgentScope is shown as shipped (no breakpoint: no
cache read at all) and, to compare the layouts rather than the shipping defaults, with a
breakpoint added on its system prompt and on the last block of every request. Output
tokens are the recorded ones for reasoning steps and the summary's own for summary calls,
the same for both systems. The ceiling is a perfect prefix cache: only each step's new
messages read uncached.
"""

from __future__ import annotations

import statistics
from typing import Any

from ._common import Options
from ._data import SWEBENCH_DIR, Session, load_swebench

__all__ = ["run"]

LIMIT = 3000
WINDOWS = (16_000, 32_000, 200_000)


def _prices() -> dict[str, Any]:
    from contextfold.replay import load_prices

    return load_prices()["anthropic"]


async def ours(session: Session, window: int) -> Any:
    """Our engine's replay of one run, priced under the Anthropic cache model."""
    from contextfold.context import ContextConfig
    from contextfold.replay import load_trajectory, replay_run

    run = load_trajectory(SWEBENCH_DIR / f"{session.name}.traj.json")
    result = await replay_run(
        run, context_size=window, config=ContextConfig(tool_result_limit=LIMIT), cache="anthropic"
    )
    if result.error is not None or result.cost is None:
        raise RuntimeError(f"replay of {session.name} failed: {result.error}")
    return result.cost


def _with_breakpoints(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with a breakpoint on its system prompt and on its very last block."""
    body = {**body, "messages": [dict(m) for m in body["messages"]]}
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    elif isinstance(system, list) and system:
        body["system"] = [*system[:-1], {**system[-1], "cache_control": {"type": "ephemeral"}}]
    last = body["messages"][-1]
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    last["content"] = [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}]
    return body


async def agentscope(session: Session, window: int, outputs: list[int]) -> dict[str, Any]:
    """AgentScope's replay of one run, priced as shipped and with breakpoints added."""
    from contextfold.replay import AnthropicCache, anthropic_blocks
    from contextfold.token import counter_for_model

    from . import _agentscope

    result = await _agentscope.run_session(
        session, context_size=window, record=True, tool_result_limit=LIMIT
    )
    rates = _prices()
    counter = counter_for_model("gpt-4o")
    out: dict[str, Any] = {}
    for label, transform in (("shipped", lambda b: b), ("breakpoints", _with_breakpoints)):
        cache = AnthropicCache()
        dollars = read = total = output_dollars = 0.0
        summaries = iter(result.compressions)
        for i, (kind, step, body) in enumerate(result.extra["bodies"]):
            usage = cache.request(anthropic_blocks(transform(body), counter), at=10.0 * i)
            if kind == "summary":
                output = counter.count_text(next(summaries).summary_text)
            else:
                output = outputs[step] if step < len(outputs) else 20
            dollars += (
                usage.uncached * rates["input"]
                + usage.write * rates["cache_write"]
                + usage.read * rates["cache_read"]
                + output * rates["output"]
            ) / 1e6
            output_dollars += output * rates["output"] / 1e6
            read += usage.read
            total += usage.total
        out[label] = (dollars, read / total if total else 0.0, dollars - output_dollars)
    return out


def _recorded_outputs(session: Session) -> list[int]:
    from contextfold.replay import load_trajectory
    from contextfold.token import counter_for_model

    counter = counter_for_model("gpt-4o")
    run = load_trajectory(SWEBENCH_DIR / f"{session.name}.traj.json")
    return [
        m.usage.output_tokens
        if m.usage is not None and m.usage.output_tokens
        else counter.count_message(m)
        for m in run.messages
        if m.role == "assistant"
    ]


def _gap_parts(cost: Any) -> tuple[int, int]:
    """What a run reads uncached beyond the perfect-prefix ceiling, in two parts: the first
    reasoning call after each summary call (beyond its new messages) and the summary calls."""
    rewrite = asked = 0
    previous = None
    for call in cost.calls:
        missed = call.uncached + call.write
        if call.kind == "summary":
            asked += missed
        elif previous == "summary":
            rewrite += max(missed - call.new_tokens, 0)
        previous = call.kind
    return rewrite, asked


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


async def run(opts: Options) -> str:
    sessions = load_swebench(limit=6 if opts.quick else None)
    rows = []
    verdicts = []
    raw_costs: list[float] = []
    for session in sessions:
        raw = await ours(session, 10**9)
        raw_costs.append(raw.dollars)
    for window in WINDOWS:
        ours_costs, ours_read, ours_ceiling = [], 0.0, 0.0
        ours_input = rewrite = summary_calls = 0
        shipped, broken, bp_read = [], [], []
        ours_inputs, broken_inputs = [], []
        for session in sessions:
            cost = await ours(session, window)
            ours_costs.append(cost.dollars)
            ours_inputs.append(cost.dollars - cost.output * cost.rates["output"] / 1e6)
            ours_read += cost.read
            ours_input += cost.input
            ours_ceiling += cost.ceiling_share * cost.input
            rewritten, asked = _gap_parts(cost)
            rewrite += rewritten
            summary_calls += asked
            theirs = await agentscope(session, window, _recorded_outputs(session))
            shipped.append(theirs["shipped"][0])
            broken.append(theirs["breakpoints"][0])
            bp_read.append(theirs["breakpoints"][1])
            broken_inputs.append(theirs["breakpoints"][2])
        share = ours_read / ours_input if ours_input else 0.0
        ceiling = ours_ceiling / ours_input if ours_input else 0.0
        ratios = [o / t for o, t in zip(ours_costs, broken, strict=True) if t]
        input_ratios = [o / t for o, t in zip(ours_inputs, broken_inputs, strict=True) if t]
        rows.append(
            f"| {window:,} | ${_median(ours_costs):.3f} | ${_median(shipped):.3f} | "
            f"${_median(broken):.3f} | {100 * (1 - _median(ratios)):.1f}% | "
            f"{100 * (1 - _median(input_ratios)):.1f}% | "
            f"{100 * share:.1f}% | {100 * ceiling:.1f}% | {100 * _median(bp_read):.1f}% |"
        )
        if window in (16_000, 32_000):
            saving = 1 - _median(ratios)
            met_cost = "met" if saving >= 0.30 else "MISSED"
            target = 0.95 if ceiling >= 0.95 else ceiling - 0.01
            met_share = "met" if share >= target else "MISSED"
            verdicts.append(
                f"{window:,}: cost {100 * saving:.1f}% below AgentScope with breakpoints "
                f"(target 30%: {met_cost}); cache read {100 * share:.1f}% (target "
                f"{100 * target:.1f}%: {met_share}; of the {100 * (ceiling - share):.2f} "
                f"points under the ceiling, {100 * rewrite / ours_input:.2f} are the first "
                "request after each compaction writing its new summary and kept messages, "
                f"{100 * summary_calls / ours_input:.2f} the summary calls' instruction and "
                "the messages not yet cached)"
            )
        if window == 200_000:
            same = all(abs(a - b) < 1e-9 for a, b in zip(ours_costs, raw_costs, strict=True))
            verdicts.append(
                f"200,000: every run costs {'exactly' if same else 'NOT'} what sending the "
                f"raw history costs (median ${_median(raw_costs):.3f})"
            )
    return (
        "## Figure 5: cost per run with the prompt cache modelled\n\n"
        f"{len(sessions)} recorded SWE-bench runs, extractive summarizer for both, "
        f"tool_result_limit={LIMIT}, Anthropic cache model at Claude Sonnet 4.5 prices. "
        "Costs are medians over runs; the saving is the median of per-run ratios against "
        "AgentScope with breakpoints added; the input-side saving is the same ratio with "
        "output tokens left out of both (the part of the bill the context decides); cache "
        "read is the share of all input tokens (summary calls included) read from the "
        "cache, over all runs.\n\n"
        "| window | contextfold | AgentScope as shipped | AgentScope + breakpoints | "
        "saving | input-side saving | our cache read | perfect-prefix ceiling | "
        "AgentScope+bp cache read |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\n"
        + "; ".join(verdicts)
        + ".\n"
    )
