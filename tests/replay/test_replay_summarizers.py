"""Choosing the replay's summarizer, and replaying with the embedded model."""

from __future__ import annotations

import pytest

from contextfold._exceptions import AuthenticationError
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock, Trajectory
from contextfold.replay import ExtractiveSummarizer, replay_run, summarizer_from_string
from contextfold.token import OpenAITokenCounter


def test_extractive_is_built_with_the_replay_counter() -> None:
    counter = OpenAITokenCounter("cl100k_base")
    summarizer = summarizer_from_string("extractive", token_counter=counter)
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.token_counter is counter


def test_an_unknown_summarizer_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'extractive', 'local'"):
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
    from contextfold.model._local import LocalChatModel

    summarizer = LocalChatModel(max_tokens=256, context_size=2048)
    result = await replay_run(_toy(7), context_size=1500, summarizer=summarizer)
    assert result.error is None
    assert result.compressions >= 1
    assert result.compression_fallbacks == 0  # the model's summary was valid
    assert result.peak_tokens <= 1500
