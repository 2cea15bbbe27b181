"""What idle compaction changes in cost, on the recorded Claude Code sessions' real gaps
(issue 30, point 2).

Inputs are the recordings alone: each main-thread call's time, its prompt size (input plus
cache reads plus cache writes, as Anthropic reported it), and whether Anthropic read the
cache on it. User turns start at the user's typed messages. The prompt grows by the
recorded deltas; a policy may compact it, after which it grows by the same deltas from the
compacted size (``reserve_ratio`` of the window plus the summary).

Three policies, each at the same window, trigger and summary size:

- **at the trigger** (blocking, today's behaviour and that of AgentScope and Claude Code):
  the summary call runs at the first call whose prompt is over the trigger, on that call's
  cache: warm or cold as Anthropic reported for that recorded call;
- **always at long pauses** (the trivial strategy): whenever the user has been away
  ``lifetime - margin`` seconds and the prompt is over half the trigger, compact then;
- **idle** (ours, ``BackgroundConfig(idle=True)``): at that moment only if the prompt plus
  the median growth of the last five turns would cross the trigger; otherwise as blocking.

An idle summary call is priced as a cache read: it is sent ``margin`` seconds before the
documented 5-minute lifetime, and in these recordings the longest pause after which the
cache was still read is 241 s, while every pause of 263 s or more found it cold. Every
other call is priced as recorded: a cold call writes its whole prompt; a warm one reads
what the previous call sent (unless a compaction changed the prefix since, then it writes
everything) and writes the rest. Prices: Anthropic Claude Sonnet 4.5 from
``contextfold/replay/pricing.json``.

Run: ``python -m benchmarks.idle_compaction [--window 64000] [--margin 90]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ._data import REPO_ROOT

SESSIONS = sorted(
    p
    for d in ("claude-code-codemie", "claude-code-tracelab", "claude-code-harbor")
    for p in (REPO_ROOT / "data" / "trajectories" / d).glob("*.jsonl")
)
PRICES = json.loads((REPO_ROOT / "src/contextfold/replay/pricing.json").read_text())["anthropic"]
LIFETIME = 300.0
SUMMARY_OUTPUT = 2_000  # tokens of summary written (our summary cap at 16k-64k windows)
INSTRUCTION = 300  # tokens of the summary instruction after the prefix


@dataclass
class Call:
    at: float
    prompt: int
    warm: bool
    output: int
    turn_start: bool
    """The first call after a message the user typed."""


def load_calls(path: Path) -> list[Call]:
    """Main-thread calls of the session's main model, usage counted once per response."""
    rows: dict[str, dict[str, object]] = {}
    models: Counter[str] = Counter()
    typed_since_last = True
    order: list[str] = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("isSidechain"):
            continue
        message = record.get("message") or {}
        if record.get("type") == "user":
            content = message.get("content")
            texts = [content] if isinstance(content, str) else []
            if isinstance(content, list):
                texts = [b.get("text", "") for b in content if b.get("type") == "text"]
            if any(t and not t.startswith(("<", "[Request interrupted", "Caveat:")) for t in texts):
                typed_since_last = True
        if record.get("type") != "assistant" or "usage" not in message:
            continue
        usage = message["usage"]
        mid = message["id"]
        if mid not in rows:
            order.append(mid)
            at = datetime.datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
            rows[mid] = {"at": at.timestamp(), "usage": usage, "turn_start": typed_since_last}
            models[message.get("model", "")] += 1
            typed_since_last = False
        rows[mid]["output"] = usage.get("output_tokens", 0)
        rows[mid]["model"] = message.get("model", "")
    main = models.most_common(1)[0][0] if models else ""
    calls = []
    for mid in order:
        row = rows[mid]
        if row["model"] != main:
            continue
        usage = row["usage"]
        assert isinstance(usage, dict)
        read = int(usage.get("cache_read_input_tokens") or 0)
        prompt = int(usage.get("input_tokens") or 0) + read
        prompt += int(usage.get("cache_creation_input_tokens") or 0)
        calls.append(
            Call(
                at=float(row["at"]),  # type: ignore[arg-type]
                prompt=prompt,
                warm=read > 0,
                output=int(row["output"]),  # type: ignore[call-overload]
                turn_start=bool(row["turn_start"]),
            )
        )
    return calls


@dataclass
class Bill:
    compactions: int = 0
    cold_summaries: int = 0
    cold_written: int = 0
    """Tokens written by calls that found the cache cold."""
    input_dollars: float = 0.0
    output_dollars: float = 0.0
    gaps: list[float] = field(default_factory=list)

    @property
    def dollars(self) -> float:
        return self.input_dollars + self.output_dollars


def price(read: int, write: int, output: int) -> tuple[float, float]:
    return (
        (read * PRICES["cache_read"] + write * PRICES["cache_write"]) / 1e6,
        output * PRICES["output"] / 1e6,
    )


def simulate(calls: list[Call], policy: str, window: int, margin: float) -> Bill:
    trigger, reserve = int(0.8 * window), int(0.05 * window)
    fire_after = LIFETIME - margin
    bill = Bill()
    size = 0  # the simulated prompt
    sent = 0  # what the previous call sent under the current prefix (0: a new prefix)
    growth: list[int] = []
    turn_began = 0

    def summarize(cached: int) -> None:
        """One summary call on the prompt as it is, ``cached`` tokens of it read."""
        nonlocal size, sent
        inp, out = price(cached, size - cached, SUMMARY_OUTPUT)
        bill.input_dollars += inp + INSTRUCTION * PRICES["input"] / 1e6
        bill.output_dollars += out
        bill.compactions += 1
        bill.cold_summaries += cached == 0
        size, sent = reserve + SUMMARY_OUTPUT, 0

    previous: Call | None = None
    for call in calls:
        delta = call.prompt - previous.prompt if previous else call.prompt
        if previous is not None and call.turn_start:
            growth.append(max(0, size - turn_began))
            gap = call.at - previous.at
            bill.gaps.append(gap)
            if gap >= fire_after and policy != "blocking":
                recent = growth[-5:]
                due = (
                    size > trigger / 2
                    if policy == "always"
                    else size + int(statistics.median(recent)) > trigger
                )
                if due:
                    summarize(cached=size)  # sent before the cache lifetime ends
        size = max(reserve, size + delta)
        if call.turn_start:
            turn_began = size - delta
        if size > trigger:  # the request to send is over: summarize it first
            summarize(cached=min(sent, size) if call.warm else 0)
        cached = min(sent, size) if call.warm else 0
        bill.cold_written += 0 if call.warm else size
        inp, out = price(cached, size - cached, call.output)
        bill.input_dollars += inp
        bill.output_dollars += out
        sent = size
        previous = call
    return bill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=64_000)
    parser.add_argument("--margin", type=float, default=90.0)
    args = parser.parse_args()
    print(
        f"window {args.window:,}, trigger 0.8, reserve 0.05, summary {SUMMARY_OUTPUT:,} "
        f"tokens, cache lifetime {LIFETIME:.0f} s, idle fires {LIFETIME - args.margin:.0f} s "
        "into a pause\n"
    )
    print(
        "| session | calls | pauses >= fire | policy | compactions | cold summaries "
        "| tokens written cold | input $ | total $ |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, Bill] = {}
    for path in SESSIONS:
        calls = load_calls(path)
        if len(calls) < 2:
            continue
        for policy in ("blocking", "always", "idle"):
            bill = simulate(calls, policy, args.window, args.margin)
            long_pauses = sum(g >= LIFETIME - args.margin for g in bill.gaps)
            total = totals.setdefault(policy, Bill())
            total.compactions += bill.compactions
            total.cold_summaries += bill.cold_summaries
            total.cold_written += bill.cold_written
            total.input_dollars += bill.input_dollars
            total.output_dollars += bill.output_dollars
            print(
                f"| {path.stem[:16]} | {len(calls)} | {long_pauses} | {policy} | "
                f"{bill.compactions} | {bill.cold_summaries} | {bill.cold_written:,} | "
                f"{bill.input_dollars:.3f} | {bill.dollars:.3f} |"
            )
    base = totals["blocking"].dollars
    for policy, bill in totals.items():
        change = (bill.dollars - base) / base * 100
        print(
            f"| **all** | | | {policy} | {bill.compactions} | {bill.cold_summaries} | "
            f"{bill.cold_written:,} | {bill.input_dollars:.3f} | {bill.dollars:.3f} "
            f"({change:+.1f}%) |"
        )


if __name__ == "__main__":
    main()
