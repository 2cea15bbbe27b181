"""A large tool result in the engine: redacted once, counted and cut off the event loop
(issue 28).

``ContextEngine.add_tool_results`` counted a 20 MB result's tokens on the loop (0.75 s with
``AnthropicEstimator``), and with ``ContextConfig(redact=...)`` the result was redacted
twice, once for the offload and again, whole and on the loop, before the cut.
"""

from __future__ import annotations

import threading

from contextfold.context import ContextConfig, ContextEngine, redact_credentials
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.token import AnthropicEstimator
from contextfold.workspace import MemoryWorkspace

LINE = "2026-12-04T05:00:00Z INFO worker-7 served, token ghp_16C7e42F292c6912E7710c838347Ae178B4a\n"
LONG = LINE * 6_000  # ~530K characters: over the off-loop threshold
LOOP = threading.main_thread()


class _Spying(AnthropicEstimator):
    """Notes, for each long text counted, whether it was counted on the loop's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.long_on_loop: list[int] = []
        self.long_elsewhere: list[int] = []

    def count_text(self, text: str) -> int:
        if len(text) > 100_000:
            on_loop = threading.current_thread() is LOOP
            (self.long_on_loop if on_loop else self.long_elsewhere).append(len(text))
        return super().count_text(text)


async def _engine(config: ContextConfig, counter: AnthropicEstimator) -> ContextEngine:
    ws = MemoryWorkspace()
    await ws.initialize()
    engine = ContextEngine(
        counter=counter, context_size=50_000, config=config, offloader=ws, session_id="s"
    )
    engine.append(Msg("assistant", [ToolCallBlock(id="c", name="sh", input={})], "assistant"))
    return engine


async def test_a_truncated_result_is_redacted_once() -> None:
    seen: list[int] = []

    def redact(text: str) -> str:
        seen.append(len(text))
        return redact_credentials(text)

    output = LINE * 400  # ~35K characters, over the limit: redacted on the loop
    config = ContextConfig(redact=redact, tool_result_limit=2_000)
    engine = await _engine(config, AnthropicEstimator())
    stored = await engine.add_tool_results(
        Msg("tool", [ToolResultBlock(id="c", name="sh", output=output)], "user")
    )
    assert seen.count(len(output)) == 1, "the whole result went through the redactor twice"
    text = stored.blocks()[0]
    assert isinstance(text, ToolResultBlock)
    assert "ghp_16C7e42F292c" not in text.text()
    assert "[REDACTED" in text.text()


async def test_a_large_result_is_counted_and_cut_off_the_loop() -> None:
    counter = _Spying()
    config = ContextConfig(redact=redact_credentials, tool_result_limit=2_000)
    engine = await _engine(config, counter)
    stored = await engine.add_tool_results(
        Msg("tool", [ToolResultBlock(id="c", name="sh", output=LONG)], "user")
    )
    text = stored.blocks()[0]
    assert isinstance(text, ToolResultBlock)
    assert counter.count_text(text.text()) <= 2_000
    assert "ghp_16C7e42F292c" not in text.text()
    assert counter.long_elsewhere, "the long result was counted"
    assert counter.long_on_loop == [], "a long result was counted on the event loop"
