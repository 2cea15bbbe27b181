"""Per-step cost: the engine counts only new messages (no timing, call counts)."""

from __future__ import annotations

from contextfold.context import ContextConfig, ContextEngine
from contextfold.message import ToolSpec
from contextfold.model import ScriptedModel
from contextfold.token import OpenAITokenCounter

from .ctx_support import call, results, words


class CountingCounter(OpenAITokenCounter):
    """Counts how many texts get tokenized."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.calls = 0

    def count_text(self, text: str) -> int:
        self.calls += 1
        return super().count_text(text)


async def tokenizations_per_step(history: int) -> int:
    counter = CountingCounter()
    model = ScriptedModel([], context_size=10_000_000, token_counter=counter)
    engine = ContextEngine(config=ContextConfig(), model=model, session_id="c")
    tools = [ToolSpec(name="bash")]
    for _ in range(history):
        asst = call("bash")
        engine.append(asst)
        await engine.add_tool_results(results(asst, words(50)))
    await engine.prepare("sys", tools)
    counter.calls = 0
    asst = call("bash")
    engine.append(asst)
    await engine.add_tool_results(results(asst, words(50)))
    await engine.prepare("sys", tools)
    return counter.calls


async def test_a_step_tokenizes_only_the_new_messages() -> None:
    small = await tokenizations_per_step(5)
    large = await tokenizations_per_step(500)
    assert small == large
    assert large <= 6  # two new messages (role + content) and the result's own count
