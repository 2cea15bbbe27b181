"""Choosing the replay's summarizer, and replaying with the embedded model."""

from __future__ import annotations

import pytest

from contextfold._exceptions import AuthenticationError
from contextfold.context import EmptySummarizer, ExtractiveSummarizer, ModelSummarizer
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.replay import Trajectory, replay_run, summarizer_from_string


def test_extractive_and_none_need_no_model() -> None:
    assert isinstance(summarizer_from_string("extractive"), ExtractiveSummarizer)
    assert isinstance(summarizer_from_string(" None "), EmptySummarizer)


async def test_none_writes_empty_fields_and_the_engine_keeps_its_own_additions() -> None:
    result = await replay_run(_toy(12), context_size=1500, summarizer=EmptySummarizer())
    assert result.compressions >= 1
    assert result.compression_fallbacks == 0


def test_an_unknown_summarizer_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'extractive', 'none', 'local'"):
        summarizer_from_string("gpt-4o")


def test_a_provider_model_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
        summarizer_from_string("anthropic:claude-sonnet-4-5")


def _toy(n: int) -> Trajectory:
    msgs = [Msg("user", "List the files in each directory, one command per step.", "user")]
    for i in range(n):
        call = ToolCallBlock(id=f"c{i}", name="bash", input={"command": f"ls dir{i}"})
        files = " ".join(f"file{i}_{k}.py" for k in range(40))
        msgs.append(Msg("assistant", [call], "assistant"))
        msgs.append(Msg("user", [ToolResultBlock(id=f"c{i}", name="bash", output=files)], "user"))
    return Trajectory(instance_id="toy", system="You are terse.", messages=msgs)


@pytest.mark.slow
async def test_replay_with_the_embedded_model_writes_real_summaries() -> None:
    pytest.importorskip("llama_cpp", reason="the embedded model needs the 'local' extra")
    from contextfold.model import LocalChatModel

    summarizer = ModelSummarizer(LocalChatModel(max_tokens=512, context_size=2048))
    result = await replay_run(_toy(7), context_size=1500, summarizer=summarizer)
    assert result.error is None
    assert result.compressions >= 1
    assert result.compression_fallbacks == 0  # the model's summary was valid
    assert result.peak_tokens <= 1500
