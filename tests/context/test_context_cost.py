"""Per-step cost: a step tokenizes only new messages (counted, not timed).

The count is taken where tokenization really happens: the encoding's counting function that
every ``OpenAITokenCounter`` method ends in (``count_text``, ``count_texts`` and
``count_message`` alike), so no path around it goes unseen. A step is what an agent does
with a counter calibrated by reported usage (as for Claude): ``prepare``, then the model's
``observe`` of the request it sent, which counts the whole request and so relies on each
message's cached count. A broken per-message cache must be caught by the same measurement:
that is the second test.
"""

from __future__ import annotations

from contextfold.context import ContextConfig, ContextEngine
from contextfold.message import Msg, ToolSpec, Usage
from contextfold.token import CalibratedCounter, OpenAITokenCounter

from .ctx_support import call, results, words


class TokenizationCounter(OpenAITokenCounter):
    """Counts every text handed to the tokenizer. With ``cache=False`` it also forgets
    each message's cached count before counting it: a broken per-message cache."""

    def __init__(self, *, cache: bool = True) -> None:
        super().__init__("o200k_base")
        self.tokenizations = 0
        self._cache_works = cache
        tokenize = self._count

        def counted(text: str) -> int:
            self.tokenizations += 1
            return tokenize(text)

        self._count = counted

    def count_message(self, msg: Msg) -> int:
        if not self._cache_works:
            msg = msg.model_copy()  # a copy starts with an empty token cache
        return super().count_message(msg)


async def tokenizations_per_step(history: int, *, cache: bool = True) -> int:
    """Texts tokenized by one step (a call, its result and the next prepare) after
    ``history`` exchanges."""
    tokenizer = TokenizationCounter(cache=cache)
    counter = CalibratedCounter(tokenizer)
    engine = ContextEngine(
        counter=counter, context_size=10_000_000, config=ContextConfig(), session_id="c"
    )
    tools = [ToolSpec(name="bash")]

    async def step(reported: int) -> None:
        asst = call("bash")
        engine.append(asst)
        await engine.add_tool_results(results(asst, words(50)))
        sent = await engine.prepare("sys", tools)
        counter.observe(sent.messages(), tools, Usage(input_tokens=reported))

    for i in range(history):
        await step(100 * (i + 1))
    tokenizer.tokenizations = 0
    await step(100 * (history + 1))
    return tokenizer.tokenizations


async def test_a_step_tokenizes_only_the_new_messages() -> None:
    small = await tokenizations_per_step(5)
    large = await tokenizations_per_step(500)
    assert small == large
    assert large <= 8  # the two new messages' texts and the result's own count


async def test_the_measurement_catches_a_broken_per_message_cache() -> None:
    # The same measurement with a counter that re-tokenizes every message it is asked
    # about: a step now costs more with a longer history, which the test above forbids.
    small = await tokenizations_per_step(5, cache=False)
    large = await tokenizations_per_step(500, cache=False)
    assert large > small
