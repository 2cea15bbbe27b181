"""LocalChatModel reports how much of each prompt llama.cpp's KV cache served."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextfold.message import Msg
from contextfold.model import LocalChatModel, ResponseCompleted
from contextfold.model._local_kvcache import PerfMark, shared_prefix
from tests.sample_tools import SEARCH, WEATHER

# Long enough that the shared prefix dominates the prompt (~480 tokens).
LONG_SYSTEM = "You are a careful analyst. " + " ".join(
    f"Rule {i}: check every fact twice before you answer." for i in range(40)
)


def _ask(question: str, system: str = LONG_SYSTEM) -> list[Msg]:
    return [Msg("system", system, "system"), Msg("user", question, "user")]


def _system_tokens(model: LocalChatModel) -> int:
    # The system text sits between the ChatML header and <|im_end|>; its edges may merge
    # differently with the newline before it, hence the slack of 2.
    return model.token_counter.count_text(LONG_SYSTEM) - 2


async def test_second_request_sharing_a_long_prefix_reads_it_from_the_cache(
    local_model: LocalChatModel,
) -> None:
    await local_model.generate(_ask("What is two plus two?"))
    response = await local_model.generate(_ask("Name a colour."))
    assert response.usage is not None
    assert _system_tokens(local_model) <= response.usage.cache_read_tokens
    assert response.usage.cache_read_tokens <= response.usage.input_tokens


async def test_request_with_a_different_first_message_reads_almost_nothing_from_the_cache(
    local_model: LocalChatModel,
) -> None:
    await local_model.generate(_ask("What is two plus two?"))
    response = await local_model.generate(_ask("Name a colour.", system="Be terse."))
    assert response.usage is not None
    # Only the ChatML header "<|im_start|>system\n" can match.
    assert response.usage.cache_read_tokens <= 4


async def test_identical_request_is_served_from_the_cache_but_for_one_replayed_token(
    local_model: LocalChatModel,
) -> None:
    await local_model.generate(_ask("Name a colour."))
    response = await local_model.generate(_ask("Name a colour."))
    assert response.usage is not None
    # llama-cpp-python re-decodes the last prompt token to refresh the logits.
    assert response.usage.input_tokens - 1 <= response.usage.cache_read_tokens
    assert response.usage.cache_read_tokens <= response.usage.input_tokens


async def test_streamed_response_reports_the_cache_reuse(local_model: LocalChatModel) -> None:
    await local_model.generate(_ask("What is two plus two?"))
    events = [e async for e in local_model.stream(_ask("Name a colour."))]
    assert isinstance(events[-1], ResponseCompleted)
    usage = events[-1].response.usage
    assert usage is not None
    assert _system_tokens(local_model) <= usage.cache_read_tokens <= usage.input_tokens


async def test_model_chosen_tool_counts_the_request_prompt_once(
    local_model: LocalChatModel,
) -> None:
    # "auto" runs two completions (the choice, then its body) over nearly one prompt.
    tools = [WEATHER, SEARCH]
    await local_model.generate(_ask("Weather in Paris?"), tools=tools, tool_choice="auto")
    response = await local_model.generate(_ask("Weather in Rome?"), tools=tools, tool_choice="auto")
    assert response.usage is not None
    assert _system_tokens(local_model) <= response.usage.cache_read_tokens
    assert response.usage.cache_read_tokens <= response.usage.input_tokens


async def test_running_totals_include_structured_output(local_model: LocalChatModel) -> None:
    before = local_model.kv_cache
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    await local_model.structured(_ask("Which city is the capital of France?"), schema)
    after = local_model.kv_cache
    assert after.completions > before.completions
    assert after.prompt_tokens > before.prompt_tokens
    assert 0 <= after.cache_read_tokens <= after.prompt_tokens
    assert after.evaluated_tokens == after.prompt_tokens - after.cache_read_tokens


def test_perf_counters_turn_into_the_unevaluated_prompt_tokens() -> None:
    before, after = PerfMark(decoded=1000, prompt_ms=0.0), PerfMark(decoded=1025, prompt_ms=9.0)
    # 25 tokens decoded: 5 sampled tokens fed back, so 20 prompt tokens evaluated.
    assert before.cached_tokens(after, prompt_tokens=100, n_tokens=105) == 80


@given(
    decoded=st.integers(min_value=0, max_value=10_000),
    prompt=st.integers(min_value=0, max_value=5_000),
    sampled=st.integers(min_value=0, max_value=500),
)
def test_cached_tokens_stay_within_the_prompt(decoded: int, prompt: int, sampled: int) -> None:
    before, after = PerfMark(decoded=0, prompt_ms=0.0), PerfMark(decoded=decoded, prompt_ms=0.0)
    cached = before.cached_tokens(after, prompt_tokens=prompt, n_tokens=prompt + sampled)
    assert 0 <= cached <= prompt


def test_shared_prefix_stops_at_the_first_difference() -> None:
    assert shared_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert shared_prefix([1, 2], [1, 2, 3]) == 2
    assert shared_prefix([], [1]) == 0
