"""What a Chat Completions request costs: framing, tool calls, tool results, tools, images."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.message import (
    Base64Source,
    DataBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    from_openai_messages,
)
from contextfold.token import OpenAITokenCounter, TokenCounter

from .token_helpers import reference_count

TAU = (
    Path(__file__).parents[2]
    / "data"
    / "trajectories"
    / "tau-bench-airline-gpt4o"
    / "gpt-4o-airline.json"
)

# OpenAI cookbook "How to count tokens with tiktoken": these requests were sent to the API,
# which reported 129 prompt tokens (gpt-3.5-turbo, gpt-4: cl100k_base) and 124 (gpt-4o,
# gpt-4o-mini: o200k_base); with the weather tool, 105 and 101.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on "
        "opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]
WEATHER = ToolSpec(
    name="get_current_weather",
    description="Get the current weather in a given location",
    parameters={
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            },
            "unit": {
                "type": "string",
                "description": "The unit of temperature to return",
                "enum": ["celsius", "fahrenheit"],
            },
        },
        "required": ["location"],
    },
)


def _png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    data = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )
    return base64.b64encode(data).decode()


def test_message_framing_matches_the_api_reported_cookbook_counts() -> None:
    assert OpenAITokenCounter("cl100k_base").count_openai_messages(COOKBOOK_MESSAGES) == 129
    assert OpenAITokenCounter("o200k_base").count_openai_messages(COOKBOOK_MESSAGES) == 124


def test_tool_definitions_match_the_api_reported_cookbook_counts() -> None:
    messages = [
        {
            "role": "system",
            "content": "You are a helpful assistant that can answer to questions about the "
            "weather.",
        },
        {"role": "user", "content": "What's the weather like in San Francisco?"},
    ]
    for encoding, expected in (("cl100k_base", 105), ("o200k_base", 101)):
        counter = OpenAITokenCounter(encoding)
        assert counter.count_openai_messages(messages) + counter.count_tools([WEATHER]) == expected


def test_plain_message_costs_framing_plus_role_plus_content(encoding: str) -> None:
    msg = Msg("user", "Summarise the diff in two lines.", "user")
    expected = 3 + reference_count(encoding, "user") + reference_count(encoding, msg.text)
    assert OpenAITokenCounter(encoding).count_message(msg) == expected


def test_request_adds_three_tokens_priming_the_reply() -> None:
    counter = OpenAITokenCounter()
    msg = Msg("user", "hi", "user")
    assert counter.count_request([msg]) == counter.count_message(msg) + 3


def test_no_tools_cost_nothing() -> None:
    assert OpenAITokenCounter().count_tools([]) == 0


def test_count_is_cached_on_the_message_under_the_counter_name() -> None:
    counter = OpenAITokenCounter()
    msg = Msg("user", "cache me", "user")
    n = counter.count_message(msg)
    assert msg.cached_tokens(counter.name) == n
    msg.cache_tokens(counter.name, 999)  # a cached count is trusted, not recomputed
    assert counter.count_message(msg) == 999


def test_encodings_cache_under_different_names() -> None:
    assert OpenAITokenCounter("o200k_base").name != OpenAITokenCounter("cl100k_base").name


def test_tool_call_counts_the_raw_arguments_text_as_sent() -> None:
    counter = OpenAITokenCounter()
    raw = '{\n    "command":   "ls -la /tmp"\n}'
    call = ToolCallBlock(id="call_1", name="bash", input={"command": "ls -la /tmp"}, raw_input=raw)
    msg = Msg("assistant", [call], "assistant")
    expected = 3 + counter.count_text("assistant") + counter.count_text("bash")
    expected += counter.count_text(raw) + 3
    assert counter.count_message(msg) == expected


def test_tool_call_without_raw_text_counts_its_json() -> None:
    counter = OpenAITokenCounter()
    call = ToolCallBlock(id="c", name="bash", input={"command": "ls"})
    msg = Msg("assistant", [call], "assistant")
    expected = 3 + counter.count_text("assistant") + counter.count_text("bash")
    expected += counter.count_text('{"command":"ls"}') + 3
    assert counter.count_message(msg) == expected


def test_each_tool_result_is_a_tool_message() -> None:
    counter = OpenAITokenCounter()
    results = [
        ToolResultBlock(id="a", name="bash", output="total 0\n"),
        ToolResultBlock(id="b", name="bash", output=[TextBlock(text="ok")]),
    ]
    msg = Msg("user", results, "user")
    tool = counter.count_text("tool")
    expected = (3 + tool + counter.count_text("total 0\n")) + (3 + tool + counter.count_text("ok"))
    assert counter.count_message(msg) == expected


def test_thinking_text_is_counted() -> None:
    counter = OpenAITokenCounter()
    plain = Msg("assistant", [TextBlock(text="Done.")], "assistant")
    thought = "The user wants a summary; the diff touches two files."
    thinking = Msg(
        "assistant", [ThinkingBlock(thinking=thought), TextBlock(text="Done.")], "assistant"
    )
    assert counter.count_message(thinking) == counter.count_message(plain) + counter.count_text(
        thought
    )


def test_image_costs_the_tile_formula_from_its_png_header() -> None:
    counter = OpenAITokenCounter()
    image = DataBlock(source=Base64Source(media_type="image/png", data=_png(1024, 1024)))
    with_image = Msg("user", [TextBlock(text="what is this?"), image], "user")
    text_only = Msg("user", [TextBlock(text="what is this?")], "user")
    assert counter.count_message(with_image) - counter.count_message(text_only) == 765


def test_image_size_fields_take_precedence_over_the_header() -> None:
    counter = OpenAITokenCounter()
    image = DataBlock(
        source=Base64Source(media_type="image/png", data=_png(1024, 1024)), width=512, height=512
    )
    bare = Msg("user", [TextBlock(text="x")], "user")
    assert counter.count_message(Msg("user", [TextBlock(text="x"), image], "user")) == (
        counter.count_message(bare) + 85 + 170
    )


def test_gpt_4o_mini_images_use_its_own_tile_prices() -> None:
    counter = OpenAITokenCounter(images="tile-mini")
    image = DataBlock(source=Base64Source(media_type="image/png", data=_png(1024, 1024)))
    bare = Msg("user", [TextBlock(text="x")], "user")
    msg = Msg("user", [TextBlock(text="x"), image], "user")
    assert counter.count_message(msg) - counter.count_message(bare) == 2833 + 4 * 5667


def test_image_url_part_of_unknown_size_costs_the_formula_maximum() -> None:
    counter = OpenAITokenCounter()
    base = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    with_url = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "x"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]
    assert counter.count_openai_messages(with_url) - counter.count_openai_messages(base) == 1445


_TEXT = st.text(max_size=40)
_BLOCK = st.one_of(
    st.builds(TextBlock, text=_TEXT),
    st.builds(ThinkingBlock, thinking=_TEXT),
    st.builds(
        ToolCallBlock,
        id=st.just("c1"),
        name=st.sampled_from(["bash", "read_file"]),
        input=st.dictionaries(st.sampled_from(["a", "path"]), _TEXT, max_size=2),
    ),
    st.builds(ToolResultBlock, id=st.just("c1"), name=st.just("bash"), output=_TEXT),
)
_MSG = st.builds(
    Msg,
    name=st.just("agent"),
    content=st.one_of(_TEXT, st.lists(_BLOCK, max_size=4)),
    role=st.sampled_from(["user", "assistant", "system"]),
)
_TOOLS = st.sampled_from([[], [WEATHER], [WEATHER, ToolSpec(name="noop")]])


@settings(max_examples=100, deadline=None)
@given(msgs=st.lists(_MSG, max_size=6), tools=_TOOLS)
def test_request_is_the_sum_of_its_parts(msgs: list[Msg], tools: list[ToolSpec]) -> None:
    counter: TokenCounter = OpenAITokenCounter()
    parts = sum(counter.count_message(m) for m in msgs) + counter.count_tools(tools)
    assert counter.count_request(msgs, tools) == parts + counter.count_request([], ())


def test_message_the_converter_refuses_is_still_counted() -> None:
    counter = OpenAITokenCounter()
    image = DataBlock(source=Base64Source(media_type="image/png", data=_png(512, 512)))
    msg = Msg("assistant", [TextBlock(text="see"), image], "assistant")  # no images there
    text_only = Msg("assistant", [TextBlock(text="see")], "assistant")
    assert counter.count_message(msg) >= counter.count_message(text_only) + 255


def test_counting_messages_equals_counting_their_recorded_openai_form() -> None:
    runs = json.loads(TAU.read_text())[:40]
    counter = OpenAITokenCounter()
    for run in runs:
        wire = run["traj"]
        msgs = from_openai_messages(wire)
        assert counter.count_request(msgs) == counter.count_openai_messages(wire)
