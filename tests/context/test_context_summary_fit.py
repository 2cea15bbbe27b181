"""A prefix-form summary request over a request too large for the window: the newest
messages are cut to fit, and what came before them, which the provider's cache holds, is
sent as it was."""

from __future__ import annotations

from contextfold.context import (
    ArtifactLedger,
    ContextConfig,
    ContextUsage,
    ModelInput,
    SummaryRequest,
    summary_prompt,
)
from contextfold.context._summary import compose_summary
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.token import OpenAITokenCounter

from .ctx_support import words

SIZE = 4_000


def _request(newest: Msg, answer: Msg | None = None) -> SummaryRequest:
    older = [Msg("user", words(300, "task"), "user")]
    for i in range(4):
        call = Msg("agent", [ToolCallBlock(id=f"c{i}", name="bash", input={"n": i})], "assistant")
        done = ToolResultBlock(id=f"c{i}", name="bash", output=words(150, f"out{i}"))
        older += [call, Msg("tool", [done], "user")]
    context = (*older, newest, *([answer] if answer else []))
    system = Msg("system", "You are an agent.", "system")
    config = ContextConfig()
    prefix = ModelInput(system, None, context, (), ContextUsage(0, 0, 0, 0, 0, context_size=SIZE))
    return SummaryRequest(
        messages=context,
        previous=None,
        instructions=config.compression_prompt,
        hints=[],
        schema=config.summary_schema,
        prefix=prefix,
    )


def test_an_oversized_newest_turn_is_cut_and_the_cached_part_is_sent_as_it_was() -> None:
    counter = OpenAITokenCounter()
    newest = Msg("agent", [TextBlock(text=words(6_000, "huge"))], "assistant")
    request = _request(newest)
    assert request.prefix is not None
    prompt = summary_prompt(request, counter, SIZE)
    assert prompt.offered is not None, "sent as a transcript, not as the agent's prefix"
    sent = prompt.messages
    older = request.prefix.messages()[:-1]
    assert all(a is b for a, b in zip(older, sent, strict=False))
    assert counter.count_request(sent, ()) <= SIZE - SIZE // 10
    shown = sent[len(older)]
    assert shown.id == newest.id
    assert shown.text.startswith("huge")
    assert prompt.cut
    assert prompt.uncovered == 0


def test_a_cut_tool_result_keeps_its_call_id_and_its_tail() -> None:
    counter = OpenAITokenCounter()
    call = Msg("agent", [ToolCallBlock(id="big", name="bash", input={})], "assistant")
    output = words(6_000, "log") + " final-line"
    answer = Msg("tool", [ToolResultBlock(id="big", name="bash", output=output)], "user")
    prompt = summary_prompt(_request(call, answer), counter, SIZE)
    assert prompt.offered is not None
    (result,) = prompt.messages[-2].tool_results
    assert result.id == "big"
    assert result.text().endswith("final-line")
    assert counter.count_request(prompt.messages, ()) <= SIZE - SIZE // 10


def test_the_summary_says_a_message_was_read_in_part_not_that_none_was_left_out() -> None:
    config = ContextConfig()
    text = compose_summary(
        {"task_overview": "t"},
        config=config,
        counter=OpenAITokenCounter(),
        size=SIZE,
        ledger=ArtifactLedger(),
        ref=None,
        compressed=9,
        cut=True,
    )
    assert "read only in part" in text
    assert "0 oldest" not in text
