"""Token counting: throughput against the raw tokenizers, and running-total cost per append.

Run: ``python benchmarks/bench_tokens.py`` (from the repo root; add ``src`` to
``PYTHONPATH`` if the package is not installed). Prints a markdown table.

* Throughput: every message of the recorded SWE-bench runs, counted as a ``Msg`` by
  ``OpenAITokenCounter.count_message`` (framing included, cache empty), against the raw
  tokenizer counting the same texts (toktok single-threaded and toktok on all cores,
  ``batch_count``; tiktoken ``encode_ordinary``). The ratio is ours / raw tokens per second.
* Running total: a 10,000-message history built from the same messages; the median time
  of one ``ContextEngine.append`` (counting the new message included) around 100 messages
  and at the last 100 of 10,000, which repeat the same texts, and their ratio (1.0 means
  the cost does not grow with the history). For contrast, re-summing the whole
  history (with counts cached) per step.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import toktok

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from contextfold.context import ContextEngine  # noqa: E402
from contextfold.message import Msg  # noqa: E402
from contextfold.token import OpenAITokenCounter, tiktoken_encoding  # noqa: E402

RUNS = ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"
ENCODING = "o200k_base"
HISTORY = 10_000
WINDOW = 100  # appends timed around each history size


def load_messages() -> list[tuple[str, str]]:
    """(role, text) of every message of every recorded run."""
    out: list[tuple[str, str]] = []
    for path in sorted(RUNS.glob("*.traj.json")):
        for message in json.loads(path.read_text())["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(p.get("text", "")) for p in content)
            role = message.get("role", "user")
            out.append((role if role in ("user", "assistant", "system") else "user", content or ""))
    return out


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Shortest wall time of ``repeats`` runs of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def throughput(messages: list[tuple[str, str]]) -> list[tuple[str, float, int]]:
    texts = [t for _, t in messages]
    enc = tiktoken_encoding(ENCODING)
    counter = OpenAITokenCounter(ENCODING)
    tokens = sum(toktok.batch_count(texts, ENCODING))

    def ours() -> None:
        fresh = [Msg(role, text, role) for role, text in messages]  # empty caches
        for m in fresh:
            counter.count_message(m)

    def msg_build() -> None:
        [Msg(role, text, role) for role, text in messages]

    build = best_of(5, msg_build)
    results = [
        (
            "toktok batch_count, 1 thread",
            best_of(5, lambda: toktok.batch_count(texts, ENCODING, threads=1)),
        ),
        ("toktok batch_count, all cores", best_of(5, lambda: toktok.batch_count(texts, ENCODING))),
        ("tiktoken encode_ordinary", best_of(3, lambda: [enc.encode_ordinary(t) for t in texts])),
        ("ours: count_message (uncached)", best_of(5, ours) - build),
    ]
    return [(name, tokens / seconds, tokens) for name, seconds in results]


def append_cost(messages: list[tuple[str, str]]) -> tuple[float, float, float, float]:
    counter = OpenAITokenCounter(ENCODING)
    late_start = HISTORY - WINDOW

    def source(i: int) -> tuple[str, str]:
        # the last window repeats the texts of the early one, so both time the same work
        j = i - late_start + WINDOW // 2 if i >= late_start else i
        return messages[j % len(messages)]

    history = [Msg(r, t, r) for r, t in map(source, range(HISTORY))]
    engine = ContextEngine(counter=counter, context_size=10**12)
    per_append: list[float] = []
    for msg in history:
        start = time.perf_counter_ns()
        engine.append(msg)
        per_append.append(time.perf_counter_ns() - start)
    # Separately, so its heavy steps do not disturb the append timings: re-summing the
    # whole history per step (counts are cached by now, so this is the best case).
    per_resum: list[float] = []
    for end in [*range(WINDOW // 2, WINDOW + WINDOW // 2), *range(late_start, HISTORY)]:
        start = time.perf_counter_ns()
        sum(counter.count_message(m) for m in history[: end + 1])
        per_resum.append(time.perf_counter_ns() - start)
    early = statistics.median(per_append[WINDOW // 2 : WINDOW + WINDOW // 2])
    late = statistics.median(per_append[-WINDOW:])
    resum_early = statistics.median(per_resum[:WINDOW])
    resum_late = statistics.median(per_resum[WINDOW:])
    assert engine.context_tokens == sum(counter.count_message(m) for m in history)
    return early, late, resum_early, resum_late


def main() -> None:
    messages = load_messages()
    chars = sum(len(t) for _, t in messages)
    print(f"corpus: {len(messages)} messages, {chars / 1e6:.1f} M chars, encoding {ENCODING}\n")
    rows = throughput(messages)
    by_name = {name: rate for name, rate, _ in rows}
    ours = by_name["ours: count_message (uncached)"]
    print("| counting | tokens/s | ours / this |")
    print("|---|---:|---:|")
    for name, rate, _ in rows:
        print(f"| {name} | {rate / 1e6:.2f} M | {ours / rate:.2f} |")
    early, late, resum_early, resum_late = append_cost(messages)
    print("\n| running total, per appended message | at ~100 msgs | at ~10,000 msgs | ratio |")
    print("|---|---:|---:|---:|")
    print(
        f"| ContextEngine.append (median) | {early / 1e3:.1f} µs | {late / 1e3:.1f} µs "
        f"| {late / early:.2f} |"
    )
    print(
        f"| re-sum whole history, cached counts (median) | {resum_early / 1e3:.1f} µs "
        f"| {resum_late / 1e3:.1f} µs | {resum_late / resum_early:.1f} |"
    )


if __name__ == "__main__":
    main()
