"""Figure 2(a): predicting each call's prompt tokens, against the trivial anchored estimate.

contextfold's ``CalibratedCounter`` predicts a call's prompt as *the previous call's
reported count plus a learned ratio times the o200k count of what was added since*; when
the request does not extend the last one it reports (after a compaction) it falls back to
o200k scaled up by the last call's reported/estimated ratio when o200k undercounted.
The fair baseline is given the same anchor. Strategies, each fed only what a
running agent has (the reported counts of the earlier calls of the same run):

- **ours**: ``CalibratedCounter(OpenAITokenCounter("o200k_base"))``, ``count_request +
  correction``, observing each call's reported count after it;
- **anchored bytes/4** and **anchored o200k**: the previous call's reported count, plus
  the new messages' UTF-8 bytes / 4 (or their plain o200k count, framing included); after
  a compaction, minus the same estimate of the messages that left the request; on the
  first call (no anchor), the unanchored estimate;
- **bytes/4** (AgentScope 2.0.11's ``count_tokens`` rule: every text of the request,
  concatenated, UTF-8 bytes / 4) and **o200k** of the whole request, unanchored.

Errors are absolute and relative: on the whole prompt, ``|predicted - truth| / truth``; on
the new tokens alone, ``|predicted - truth| / (truth - previous truth)`` (calls whose prompt
grew). Calls are split by regime: call 1, call 2, calls 3 on (extending the previous
request), and the first request after each compaction.

Two data sets:

- **provider truth**: the 44 recorded SWE-bench runs (Gemini 3 Pro through OpenRouter;
  truth = the ``prompt_tokens`` it reported). These runs never compress.
- **compaction**: the same 44 runs replayed through the engine at ``context_size=16000``
  (extractive summarizer), every reasoning request as the engine prepared it; truth = the
  token count llama.cpp gives the embedded model's (SmolLM2-135M) prompt for it
  (``LlamaTokenCounter(framing="local")``: the chatml prompt ``LocalChatModel`` sends,
  tokenized by llama.cpp itself). No provider reported these requests, so the tokenizer
  is SmolLM2's, not Gemini's.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._data import SWEBENCH_DIR

__all__ = [
    "STRATEGIES",
    "Call",
    "compaction_calls",
    "predict_run",
    "provider_calls",
    "reported_prompt",
    "summarize",
    "table",
]

STRATEGIES = ("ours", "anchored bytes/4", "anchored o200k", "bytes/4", "o200k")
_HINT = "<system-reminder>Context usage:"
REGIMES = ("call 1", "call 2", "calls 3+", "after compaction")


@dataclass(frozen=True)
class Call:
    """One predicted call: its regime, the truth, the previous call's truth, predictions."""

    regime: str
    truth: int
    previous: int | None
    predicted: dict[str, int] = field(default_factory=dict)


def _bytes4(msgs: Sequence[Any]) -> int:
    return int(sum(len(_text(m).encode("utf-8")) for m in msgs) / 4 + 0.5)


def _text(msg: Any) -> str:
    parts = [msg.text]
    parts += [json.dumps(c.input) for c in msg.tool_calls]
    parts += [r.text() for r in msg.tool_results]
    return "\n".join(p for p in parts if p)


def predict_run(
    requests: Sequence[tuple[Sequence[Any], Sequence[Any], int]],
    *,
    compacted: Sequence[bool] | None = None,
) -> list[Call]:
    """The predictions of every strategy for one run's requests ``(messages, tools, truth)``,
    in order; ``compacted[i]`` marks a request that follows a compaction."""
    from contextfold.token import CalibratedCounter, OpenAITokenCounter

    o200k = OpenAITokenCounter("o200k_base")
    ours = CalibratedCounter(OpenAITokenCounter("o200k_base"))
    out: list[Call] = []
    before: list[Any] = []
    before_tools: Sequence[Any] = ()
    previous: int | None = None
    for i, (msgs, tools, truth) in enumerate(requests):
        whole_o200k = o200k.count_request(msgs, tools)
        whole_b4 = _bytes4(msgs)
        pred = {
            "ours": ours.count_request(msgs, tools) + ours.correction(msgs, tools),
            "bytes/4": whole_b4,
            "o200k": whole_o200k,
        }
        if previous is None:
            pred["anchored bytes/4"], pred["anchored o200k"] = whole_b4, whole_o200k
        else:
            old = {m.id for m in before}
            now = {m.id for m in msgs}
            added = [m for m in msgs if m.id not in old]
            left = [m for m in before if m.id not in now]
            pred["anchored bytes/4"] = previous + _bytes4(added) - _bytes4(left)
            pred["anchored o200k"] = (
                previous
                + sum(o200k.count_message(m) for m in added)
                - sum(o200k.count_message(m) for m in left)
                + (o200k.count_tools(tools) - o200k.count_tools(before_tools))
            )
        if compacted is not None and compacted[i]:
            regime = "after compaction"
        else:
            regime = "call 1" if i == 0 else "call 2" if i == 1 else "calls 3+"
        out.append(Call(regime, truth, previous, pred))
        ours.observe(msgs, tools, truth)
        before, before_tools, previous = list(msgs), tools, truth
    return out


def reported_prompt(message: dict[str, Any]) -> int:
    """The ``prompt_tokens`` the provider reported for the call that produced ``message``."""
    import ast

    extra = message.get("extra")
    if isinstance(extra, str):
        try:
            extra = ast.literal_eval(extra)
        except (ValueError, SyntaxError):
            return 0
    usage = (extra or {}).get("response", {}).get("usage") if isinstance(extra, dict) else None
    return int(usage.get("prompt_tokens") or 0) if isinstance(usage, dict) else 0


def provider_calls(limit: int | None = None) -> list[Call]:
    """Every call of the recorded runs with a reported ``prompt_tokens``."""
    from contextfold.message import Msg

    calls: list[Call] = []
    for path in sorted(SWEBENCH_DIR.glob("*.traj.json"))[:limit]:
        raw = json.loads(path.read_text(encoding="utf-8"))["messages"]
        history: list[Msg] = []
        requests: list[tuple[list[Msg], Sequence[Any], int]] = []
        for n, m in enumerate(raw):
            if m["role"] == "assistant":
                reported = reported_prompt(m)
                if reported:
                    requests.append((list(history), (), reported))
            content = m["content"]
            if not isinstance(content, str):
                content = json.dumps(content)
            history.append(Msg(m["role"], content, m["role"], id=f"{path.name}-{n}"))
        calls += predict_run(requests)
    return calls


async def _compaction_requests(
    limit: int | None,
) -> list[list[tuple[list[Any], list[Any], int, bool]]]:
    from contextfold.message import MARKER_KEY, Marker, from_openai_messages
    from contextfold.replay import RequestDump, load_recordings, replay_runs, tools_of
    from contextfold.token import LlamaTokenCounter

    truth_counter = LlamaTokenCounter(framing="local")
    runs = load_recordings([SWEBENCH_DIR]).runs[:limit]
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp:
        dump = RequestDump(tmp)
        await replay_runs(runs, context_size=16000, dump=dump)
        for run, _ in runs:
            tools = tools_of(run)
            rows = []
            prior_summary: str | None = None
            for line in dump.path(run.instance_id).read_text(encoding="utf-8").splitlines():
                item = json.loads(line)
                if item["kind"] != "reasoning":
                    continue
                msgs = from_openai_messages(item["messages"], strict=False)
                # wire messages carry no ids: the same content is the same message
                for m in msgs:
                    m.id = str(hash((m.role, _text(m))))
                # the wire form drops the engine's marker on its trailing usage note, which
                # the counter (as the engine holds the message) knows is never stored
                if msgs and msgs[-1].text.startswith(_HINT):
                    msgs[-1].metadata[MARKER_KEY] = Marker.USAGE_HINT.value
                s0, s1 = item["layers"]["summary"]
                summary = json.dumps(item["messages"][s0:s1])
                # a compaction writes a new summary; the first request after it is marked
                compacted = prior_summary is not None and summary != prior_summary
                rows.append((msgs, tools, truth_counter.count_request(msgs, tools), compacted))
                prior_summary = summary
            out.append(rows)
    return out


def compaction_calls(limit: int | None = None) -> list[Call]:
    """The engine's requests at a 16k window, truth = llama.cpp's count for SmolLM2."""
    calls: list[Call] = []
    for rows in asyncio.run(_compaction_requests(limit)):
        calls += predict_run(
            [(m, t, truth) for m, t, truth, _ in rows], compacted=[c for *_, c in rows]
        )
    return calls


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def summarize(calls: Sequence[Call], strategy: str, regime: str) -> dict[str, Any]:
    """Median and p95 of the whole-prompt and new-token errors of one strategy and regime."""
    mine = [c for c in calls if c.regime == regime]
    whole = [abs(c.predicted[strategy] - c.truth) / c.truth for c in mine if c.truth > 0]
    new = [
        abs(c.predicted[strategy] - c.truth) / (c.truth - c.previous)
        for c in mine
        if c.previous is not None and c.truth > c.previous
    ]
    return {
        "calls": len(whole),
        "whole": (statistics.median(whole) if whole else None, _pct(whole, 0.95)),
        "new": (statistics.median(new) if new else None, _pct(new, 0.95), len(new)),
    }


def table(calls: Sequence[Call], regimes: Sequence[str] = REGIMES) -> str:
    """One row per strategy and regime: whole-prompt and new-token errors."""
    rows = [
        "| regime | strategy | calls | whole prompt: median / p95 | new tokens: median / p95 |",
        "|---|---|---:|---:|---:|",
    ]
    for regime in regimes:
        if not any(c.regime == regime for c in calls):
            continue
        for strategy in STRATEGIES:
            s = summarize(calls, strategy, regime)
            wm, wp = s["whole"]
            nm, np_, nn = s["new"]
            new = "n/a" if nm is None else f"{100 * nm:.1f}% / {100 * np_:.1f}% ({nn})"
            name = f"**{strategy}**" if strategy == "ours" else strategy
            rows.append(
                f"| {regime} | {name} | {s['calls']} | {100 * wm:.2f}% / {100 * wp:.2f}% | {new} |"
            )
    return "\n".join(rows) + "\n"


def main() -> None:  # pragma: no cover - the command line
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N runs only")
    args = parser.parse_args()
    t0 = time.perf_counter()
    print("Provider truth (Gemini 3 Pro's reported prompt_tokens, recorded runs):\n")
    print(table(provider_calls(args.limit)))
    print("Engine replay at 16k (truth: llama.cpp's count of the SmolLM2 prompt):\n")
    print(table(compaction_calls(args.limit)))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()
