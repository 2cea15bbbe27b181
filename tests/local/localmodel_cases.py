"""Requests shared by the embedded-model tests."""

from __future__ import annotations

from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock


def conversation() -> list[Msg]:
    """A history with text, a tool call, its result, CJK, emoji and markup characters."""
    return [
        Msg("system", "You are a helpful assistant. Be brief. a<b & \"q\" 'x'", "system"),
        Msg("user", "东京的天气怎么样？🌧 Also: what's `x <= y && z`?", "user"),
        Msg(
            "assistant",
            [
                TextBlock(text="Let me check."),
                ToolCallBlock(id="call_1", name="get_weather", input={"city": "東京"}),
            ],
            "assistant",
        ),
        Msg(
            "user",
            [ToolResultBlock(id="call_1", name="get_weather", output='rain, 12°C <ok> {"a": 1}')],
            "user",
        ),
        Msg("assistant", "It is raining in Tokyo (12°C).", "assistant"),
        Msg("user", "Thanks! def f(x):\n    return {'k': [1, 2]}\n", "user"),
    ]
