"""The prompt-cache simulator: each provider's published rules, on wire bodies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.message import (
    MARKER_KEY,
    Marker,
    Msg,
    ToolSpec,
    anthropic_request,
    openai_request,
)
from contextfold.replay import load_prices
from contextfold.replay._cache import (
    AnthropicCache,
    Block,
    LlamaCache,
    NoCache,
    OpenAICache,
    anthropic_blocks,
    cache_model,
    llama_blocks,
    openai_blocks,
)
from contextfold.token import LlamaTokenCounter, OpenAITokenCounter

COUNTER = OpenAITokenCounter()


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def conversation(turns: int) -> list[Msg]:
    msgs = [Msg("system", words(50, "sys"), "system"), Msg("user", words(900, "task"), "user")]
    for i in range(turns):
        msgs.append(Msg("a", words(150, f"a{i}_"), "assistant"))
        msgs.append(Msg("user", words(300, f"r{i}_"), "user"))
    return msgs


def anthropic(msgs: list[Msg], **kwargs: Any) -> list[Block]:
    return anthropic_blocks(anthropic_request(msgs, cache=True, **kwargs), COUNTER)


def test_an_appended_conversation_reads_what_the_last_request_wrote() -> None:
    cache = AnthropicCache()
    first = cache.request(anthropic(conversation(1)), at=0)
    assert first.read == 0
    assert first.write == first.total  # everything up to the last breakpoint
    second = cache.request(anthropic(conversation(2)), at=10)
    assert second.read == first.total
    assert second.write == second.total - first.total


def test_a_changed_summary_breaks_everything_after_it() -> None:
    cache = AnthropicCache(min_cacheable_tokens=1)
    summary = Msg("summary", words(200, "old"), "user", metadata={MARKER_KEY: Marker.SUMMARY})
    msgs = conversation(2)
    before = [msgs[0], summary, *msgs[1:]]
    cache.request(anthropic(before), at=0)
    new_summary = summary.model_copy(update={"content": words(200, "new")})
    after = cache.request(anthropic([msgs[0], new_summary, *msgs[1:]]), at=10)
    system_tokens = anthropic(msgs[:1])[0].tokens
    assert after.read == system_tokens


def test_prefixes_shorter_than_the_minimum_are_never_cached() -> None:
    cache = AnthropicCache(min_cacheable_tokens=10**6)
    cache.request(anthropic(conversation(1)), at=0)
    again = cache.request(anthropic(conversation(1)), at=1)
    assert (again.read, again.write) == (0, 0)


def test_entries_expire_after_their_lifetime() -> None:
    cache = AnthropicCache(ttl_seconds=300)
    cache.request(anthropic(conversation(1)), at=0)
    late = cache.request(anthropic(conversation(2)), at=301)
    assert late.read == 0


def test_a_hit_is_found_only_within_the_lookback_before_a_breakpoint() -> None:
    cache = AnthropicCache(lookback_blocks=20)
    cache.request(anthropic(conversation(1)), at=0)
    # 30 turns later (60 blocks), the old breakpoint is out of the last one's lookback.
    far = cache.request(anthropic(conversation(31)), at=10)
    assert far.read == 0


def test_changing_tool_choice_invalidates_the_message_blocks() -> None:
    from contextfold.message import ToolSpec

    tools = [ToolSpec(name="bash", description=words(700, "d"))]
    cache = AnthropicCache(min_cacheable_tokens=1)
    msgs = conversation(1)
    cache.request(anthropic(msgs, tools=tools), at=0)
    forced = cache.request(anthropic(msgs, tools=tools, tool_choice="bash"), at=1)
    # tools and system stay cached; the messages do not.
    head = sum(b.tokens for b in anthropic(msgs[:1], tools=tools))
    assert forced.read == head


def test_without_breakpoints_nothing_is_cached() -> None:
    cache = AnthropicCache()
    body = anthropic_request(conversation(2))
    cache.request(anthropic_blocks(body, COUNTER), at=0)
    again = cache.request(anthropic_blocks(body, COUNTER), at=1)
    assert (again.read, again.write) == (0, 0)


def test_openai_reads_the_shared_prefix_in_increments_from_the_minimum() -> None:
    cache = OpenAICache(min_cacheable_tokens=1024, increment_tokens=128)
    blocks = openai_blocks(openai_request(conversation(1)), COUNTER)
    cache.request(blocks, at=0)
    nxt = cache.request(openai_blocks(openai_request(conversation(2)), COUNTER), at=1)
    shared = sum(b.tokens for b in blocks)
    assert nxt.read == 1024 + (shared - 1024) // 128 * 128
    assert nxt.write == 0


def openai(msgs: list[Msg]) -> list[Block]:
    return openai_blocks(openai_request(msgs), COUNTER)


def test_llama_reads_the_previous_request_whole_when_the_next_one_extends_it() -> None:
    cache = LlamaCache()
    first = cache.request(openai(conversation(1)), at=0)
    assert first.read == 0
    second = cache.request(openai(conversation(2)), at=1)
    assert second.read == first.total
    assert second.write == 0


def test_llama_keeps_only_the_last_request() -> None:
    cache = LlamaCache()
    agent = conversation(2)
    cache.request(openai(agent), at=0)
    other = [agent[0], Msg("user", words(400, "summarize"), "user")]
    cache.request(openai(other), at=1)
    back = cache.request(openai([*agent, Msg("user", "next", "user")]), at=2)
    # Only the system prompt is shared with the request in between.
    assert back.read == openai(agent[:1])[0].tokens


def test_llama_blocks_add_up_to_the_exact_local_prompt() -> None:
    counter = LlamaTokenCounter()
    msgs = conversation(1)
    tools = [ToolSpec(name="bash", description="run a command")]
    for choice in (None, "auto", "bash"):
        blocks = llama_blocks(msgs, tools, choice, counter)
        assert sum(b.tokens for b in blocks) == counter.count_request(
            msgs, tools, tool_choice=choice
        )


def test_a_changed_message_breaks_the_llama_prefix_from_its_turn_on() -> None:
    counter = LlamaTokenCounter()
    msgs = conversation(2)
    changed = [*msgs[:2], msgs[2].model_copy(update={"content": "changed"}), *msgs[3:]]
    before = llama_blocks(msgs, (), None, counter)
    after = llama_blocks(changed, (), None, counter)
    shared = [a.key == b.key for a, b in zip(before, after, strict=True)]
    assert shared == [True, True, True, False, False, False, False, False]


def test_llama_evaluates_the_last_token_of_a_repeated_request_again() -> None:
    cache = LlamaCache()
    blocks = openai(conversation(1))
    cache.request(blocks, at=0)
    again = cache.request(blocks, at=1)
    assert again.read == again.total - 1
    assert again.uncached == 1


def test_llama_has_no_minimum_and_no_lifetime() -> None:
    cache = cache_model("llama", load_prices()["llama"])
    assert isinstance(cache, LlamaCache)
    short = [Msg("user", "hi", "user")]
    cache.request(openai(short), at=0)
    later = cache.request(openai([*short, Msg("a", "hello", "assistant")]), at=10**6)
    assert later.read == openai(short)[0].tokens


def test_no_cache_reads_nothing() -> None:
    blocks = openai_blocks(openai_request(conversation(1)), COUNTER)
    assert NoCache().request(blocks, at=0).read == 0


def test_shipped_prices_name_their_sources_and_a_file_overrides_them(tmp_path: Path) -> None:
    prices = load_prices()
    for entry in prices.values():
        assert entry["sources"]["checked"]
    custom = tmp_path / "prices.json"
    custom.write_text('{"anthropic": {"input": 1.0}}')
    overridden = load_prices(custom)
    assert overridden["anthropic"]["input"] == 1.0
    assert overridden["anthropic"]["output"] == prices["anthropic"]["output"]


def test_replay_prints_the_cost_and_the_cache_read_share(swe_files: list[Path]) -> None:
    result = CliRunner().invoke(
        app, ["replay", str(swe_files[0]), "-c", "16000", "-q", "--cache", "anthropic"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "cache read" in text
    assert "$" in text
    local = CliRunner().invoke(
        app,
        [
            "replay",
            str(swe_files[0]),
            "-c",
            "8000",
            "-q",
            "--cache",
            "llama",
            "--count-as",
            "smollm2",
        ],
    )
    assert local.exit_code == 0, local.output
    assert "cache read" in " ".join(local.output.split())
    bad = CliRunner().invoke(app, ["replay", str(swe_files[0]), "--cache", "gemini"])
    assert bad.exit_code == 2


async def test_the_ceiling_is_in_the_cache_models_units(swe_files: list[Path]) -> None:
    # A run that never compresses, with the adapter's breakpoints, is exactly the perfect
    # prefix cache once its requests pass the minimum: the simulated reads meet the
    # ceiling. The old ceiling counted new messages with ``count_message`` and missed the
    # wire framing the simulator counts, so it sat above what any cache could read.
    from contextfold.replay import load_trajectory, replay_run

    run = load_trajectory(swe_files[0])
    result = await replay_run(run, context_size=10**9, cache="anthropic")
    assert result.cost is not None
    calls = result.cost.calls
    assert calls[0].new_tokens == calls[0].uncached + calls[0].write + calls[0].read
    for call in calls[1:]:
        if call.read:  # the prefix passed the 1,024-token minimum
            assert call.uncached + call.write == call.new_tokens, call
    assert result.cost.cache_read_share > 0.5
    assert abs(result.cost.ceiling_share - result.cost.cache_read_share) < 1e-9
