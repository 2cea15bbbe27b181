"""Per-step overhead of the context engine (append + prepare, no model call).

Run: ``PYTHONPATH=src python benchmarks/bench_engine.py``. A step appends one assistant
tool call and its result, then builds the next model input. The window is large enough
that no compression happens, so the figure is the engine's bookkeeping alone; the target
is the 10,000-message figure within 2x of the 100-message one.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from contextfold.context import ContextEngine, ModelSummarizer
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec
from contextfold.model import ScriptedModel

TOOLS = [ToolSpec(name="bash", description="Run one bash command.")]
SYSTEM = "You are a coding agent. " * 40
STEPS = 25
REPEATS = 40


def exchange(i: int) -> tuple[Msg, Msg]:
    call = ToolCallBlock(id=f"c{i}", name="bash", input={"command": f"grep -n foo src/mod{i}.py"})
    asst = Msg("assistant", [TextBlock(text=f"Looking at module {i}."), call], "assistant")
    output = f"src/mod{i}.py:{i}: def foo_{i}(x): return x + {i}\n" * 8
    result = Msg("tool", [ToolResultBlock(id=call.id, name="bash", output=output)], "user")
    return asst, result


async def bench(history: int) -> float:
    """Median step time with ``history`` messages already in context.

    Few steps per engine, on many fresh engines, so the history stays near its size.
    """
    model = ScriptedModel([], context_size=1_000_000_000)
    past = [exchange(i) for i in range(history // 2)]
    samples: list[float] = []
    for _ in range(REPEATS):
        engine = ContextEngine(
            counter=model.token_counter,
            context_size=model.context_size,
            summarizer=ModelSummarizer(model),
            session_id="bench",
        )
        engine.load(summary=None, context=[m for pair in past for m in pair])
        await engine.prepare(SYSTEM, TOOLS)
        # Build the messages outside the timed region: creating them is the caller's cost.
        steps = [exchange(history + i) for i in range(STEPS)]
        for asst, result in steps:
            start = time.perf_counter()
            engine.append(asst)
            await engine.add_tool_results(result)
            await engine.prepare(SYSTEM, TOOLS)
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def main() -> None:
    figures: dict[int, float] = {}
    for history in (100, 1_000, 10_000):
        figures[history] = await bench(history)
        print(f"history {history:>6} messages: {figures[history] * 1e6:8.1f} us/step (median)")
    ratio = figures[10_000] / figures[100]
    print(f"10,000 vs 100: {ratio:.2f}x (target <= 2x)")


if __name__ == "__main__":
    asyncio.run(main())
