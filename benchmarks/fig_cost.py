"""Figure 5: cost per run, with the provider's prompt cache modelled (issue 27 point 2).

Every system replays the 44 recorded SWE-bench runs with ``tool_result_limit=3000`` and
extractive summaries, and every Messages API body it would send (reasoning and summary
calls) goes through contextfold's Anthropic cache simulator (``contextfold.replay``:
breakpoints, 20-block lookback, 1,024-token minimum, 5-minute lifetime), priced at Claude
Sonnet 4.5's published rates (``contextfold/replay/pricing.json``):

* **our Agent**: ``contextfold.agent.Agent`` with ``AnthropicChatModel`` and the official
  SDK (``_agent_requests``): its bodies as sent, its default tools included (and, beside
  it, with ``readback_tools=False, tasks_enabled=False``: the bash tool alone);
* **AgentScope 2.0.11**: its own ``AnthropicChatFormatter`` output, which places no
  ``cache_control``; priced as is and with the breakpoints Anthropic's prompt-caching page
  asks for (https://platform.claude.com/docs/en/build-with-claude/prompt-caching: mark
  the system prompt, which caches the tools before it, and the last block of each request
  so the growing prefix is read back). Anthropic is the one provider that needs them:
  OpenAI, Gemini and DeepSeek cache prefixes without any marker;
* **drop oldest**, the trivial loop: system prompt, task and the newest whole steps that
  fit the window less 5%, the bash tool alone, the same two breakpoints; no summary.

Output tokens are the recorded ones for reasoning steps and the summary's own for summary
calls, the same for every system.
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


def price(
    bodies: list[tuple[str, int, dict[str, Any]]],
    outputs: list[int],
    summary_outputs: list[int],
    transform: Any = None,
) -> tuple[float, float, float]:
    """(dollars, cache-read share of input, output dollars) of one run's calls in order,
    through the Anthropic cache simulator at Sonnet 4.5's rates, one call every 10 s."""
    from contextfold.replay import AnthropicCache, anthropic_blocks
    from contextfold.token import counter_for_model

    rates = _prices()
    counter = counter_for_model("gpt-4o")
    cache = AnthropicCache()
    dollars = read = total = output_dollars = 0.0
    summaries = iter(summary_outputs)
    for i, (kind, step, body) in enumerate(bodies):
        sent = transform(body) if transform is not None else body
        usage = cache.request(anthropic_blocks(sent, counter), at=10.0 * i)
        if kind == "summary":
            output = next(summaries)
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
    return dollars, read / total if total else 0.0, output_dollars


def tool_tokens(body: dict[str, Any]) -> int:
    """o200k tokens of a request's tool schemas, as JSON."""
    import json

    from contextfold.token import counter_for_model

    tools = body.get("tools") or []
    return counter_for_model("gpt-4o").count_text(json.dumps(tools)) if tools else 0


async def agent(
    session: Session, window: int, outputs: list[int], *, default_tools: bool = True
) -> dict[str, Any]:
    """Our real ``Agent``'s requests (official SDK, prompt caching as shipped), priced."""
    from contextfold.token import counter_for_model

    from ._agent_requests import agent_requests

    bodies, answers = await agent_requests(
        session, context_size=window, tool_result_limit=LIMIT, default_tools=default_tools
    )
    counter = counter_for_model("gpt-4o")
    summaries = [counter.count_text(a) for a in answers]
    first = bodies[0][2]
    return {
        "priced": price(bodies, outputs, summaries),
        "tools": tool_tokens(first),
        "tool_list": list(first.get("tools") or []),
    }


async def agentscope(session: Session, window: int, outputs: list[int]) -> dict[str, Any]:
    """AgentScope's replay of one run, priced without and with breakpoints added."""
    from contextfold.token import counter_for_model

    from . import _agentscope

    result = await _agentscope.run_session(
        session, context_size=window, record=True, tool_result_limit=LIMIT
    )
    counter = counter_for_model("gpt-4o")
    summaries = [counter.count_text(c.summary_text) for c in result.compressions]
    bodies = result.extra["bodies"]
    return {
        "shipped": price(bodies, outputs, summaries),
        "breakpoints": price(bodies, outputs, summaries, _with_breakpoints),
        "tools": tool_tokens(bodies[0][2]),
    }


def drop_oldest_bodies(
    session: Session, window: int, tools: list[dict[str, Any]]
) -> list[tuple[str, int, dict[str, Any]]]:
    """The trivial loop's requests: system prompt, task and the newest whole steps that
    fit the window less a 5% reserve (tool outputs cut to their first ``LIMIT`` tokens),
    the same tools; no summary."""
    from contextfold.token import counter_for_model

    counter = counter_for_model("gpt-4o")
    budget = int(window * 0.95) - counter.count_text(session.system + session.task)
    budget -= sum(counter.count_text(str(t)) for t in tools)
    pairs: list[tuple[list[dict[str, Any]], int]] = []
    for i, st in enumerate(session.steps):
        output = st.output
        while counter.count_text(output) > LIMIT:  # the head that fits, as a tool cut keeps
            output = output[: min(len(output) * 9 // 10, LIMIT * 4)]
        call: list[dict[str, Any]] = [{"type": "text", "text": st.thought}] if st.thought else []
        call.append(
            {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"command": st.command}}
        )
        result = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": output}]
        size = counter.count_text(st.thought + st.command + output) + 16
        pairs.append(
            ([{"role": "assistant", "content": call}, {"role": "user", "content": result}], size)
        )
    bodies = []
    for step in range(len(session.steps) + 1):
        start, used = step, 0
        while start > 0 and used + pairs[start - 1][1] <= budget:
            start -= 1
            used += pairs[start][1]
        history = [m for pair, _ in pairs[start:step] for m in pair]
        task = {"role": "user", "content": [{"type": "text", "text": session.task}]}
        messages = [task, *history]
        body = {"system": session.system, "messages": messages, "tools": tools}
        bodies.append(("reasoning", step, body))
    return bodies


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


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _saving(ours: list[float], theirs: list[float]) -> str:
    ratios = [o / t for o, t in zip(ours, theirs, strict=True) if t]
    return f"{100 * (1 - _median(ratios)):.1f}%"


async def run(opts: Options, *, runs: int | None = None) -> str:
    sessions = load_swebench(limit=runs or (6 if opts.quick else None))
    rows = []
    for window in WINDOWS:
        cols: dict[str, list[float]] = {
            k: []
            for k in ("agent", "bare", "shipped", "bp", "drop", "agent_in", "bp_in", "drop_in")
        }
        out_share: dict[str, list[float]] = {"agent": [], "bp": [], "drop": []}
        reads: dict[str, list[float]] = {"agent": [], "bp": [], "drop": []}
        tools: dict[str, int] = {}
        for session in sessions:
            outputs = _recorded_outputs(session)
            ours = await agent(session, window, outputs)
            bare = await agent(session, window, outputs, default_tools=False)
            cols["bare"].append(bare["priced"][0])
            theirs = await agentscope(session, window, outputs)
            bash = [t for t in ours["tool_list"] if t["name"] == "bash"]
            dropped = price(
                drop_oldest_bodies(session, window, bash), outputs, [], _with_breakpoints
            )
            tools = {"agent": ours["tools"], "agentscope": theirs["tools"]}
            for key, (dollars, read, output) in (
                ("agent", ours["priced"]),
                ("bp", theirs["breakpoints"]),
                ("drop", dropped),
            ):
                cols[key].append(dollars)
                cols[f"{key}_in"].append(dollars - output)
                out_share[key].append(output / dollars if dollars else 0.0)
                reads[key].append(read)
            cols["shipped"].append(theirs["shipped"][0])
        rows.append(
            f"| {window:,} | ${_median(cols['agent']):.3f} | ${_median(cols['bare']):.3f} | "
            f"${_median(cols['bp']):.3f} | "
            f"${_median(cols['shipped']):.3f} | ${_median(cols['drop']):.3f} | "
            f"{_saving(cols['agent'], cols['bp'])} | {_saving(cols['agent_in'], cols['bp_in'])} | "
            f"{_saving(cols['agent'], cols['drop'])} | {_saving(cols['bare'], cols['bp'])} | "
            f"{100 * _median(reads['agent']):.1f}% / {100 * _median(reads['bp']):.1f}% / "
            f"{100 * _median(reads['drop']):.1f}% | "
            f"{100 * _median(out_share['agent']):.0f}% / {100 * _median(out_share['bp']):.0f}% / "
            f"{100 * _median(out_share['drop']):.0f}% |"
        )
    return (
        "## Cost per run: our Agent's requests, AgentScope with breakpoints, drop oldest\n\n"
        f"{len(sessions)} recorded SWE-bench runs, tool_result_limit={LIMIT}, extractive "
        "summaries, Anthropic cache model at Claude Sonnet 4.5 prices, one call every 10 s. "
        f"Tool schemas: our Agent {tools.get('agent', 0):,} tokens, AgentScope "
        f"{tools.get('agentscope', 0):,}, drop oldest our bash tool alone. "
        "Medians over runs; savings are medians of per-run ratios; input-side: output "
        "tokens left out of both; cache read and output share: our Agent / AgentScope+bp / "
        "drop oldest.\n\n"
        "| window | our Agent | our Agent, bash only | AgentScope + breakpoints | "
        "AgentScope, no breakpoint | drop oldest + breakpoints | saving vs AgentScope+bp | "
        "input-side saving | saving vs drop oldest | bash-only saving vs AgentScope+bp | "
        "cache read | output share of cost |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    import asyncio

    parser = argparse.ArgumentParser(description="Cost per run (Anthropic cache model).")
    parser.add_argument("--runs", type=int, help="price only the first N runs")
    args = parser.parse_args(argv)
    print(asyncio.run(run(Options(), runs=args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
