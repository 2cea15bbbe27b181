"""What the adapter contract asks of a model, as provider-neutral scripted turns.

A fake provider renders these turns in its own wire format (JSON, or SSE when the request
streams), so every adapter is exercised by the same conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contextfold.message import ToolSpec

SECRET_KEY = "sk-test-0123456789abcdefSECRETSECRET"
"""The API key the fakes are called with; it must never show up in errors or logs."""

WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@dataclass(frozen=True)
class Reply:
    """One answer: text, tool calls as (id, name, argument JSON text), optional thinking."""

    text: str = ""
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    thinking: tuple[str, str] | None = None  # (text, signature)
    input_tokens: int = 21
    output_tokens: int = 9
    cached_tokens: int = 0


@dataclass(frozen=True)
class Failure:
    """An error the provider answers with; ``kind`` names the contract error case."""

    kind: str
    retry_after: str | None = None


@dataclass(frozen=True)
class Cut:
    """A streamed answer whose connection breaks after some events."""

    reply: Reply = field(default_factory=lambda: Reply(text="Hello there, this is cut"))


Turn = Reply | Failure | Cut

HELLO = Reply(text="Hello! How can I help?")
PARIS_CALL = Reply(tool_calls=(("call_1", "get_weather", '{"city": "Paris"}'),))
SUNNY = Reply(text="It is sunny in Paris.")

SCENARIOS: dict[str, list[Turn]] = {
    "plain": [HELLO],
    "tool_round_trip": [PARIS_CALL, SUNNY],
    "parallel_tool_calls": [
        Reply(
            text="Checking both.",
            tool_calls=(
                ("call_1", "get_weather", '{"city": "Paris"}'),
                ("call_2", "get_weather", '{"city": "Rome"}'),
            ),
        )
    ],
    "structured": [
        Reply(tool_calls=(("call_s", "structured_output", '{"name": "Ada", "age": 36}'),))
    ],
    "structured_retry": [
        Reply(tool_calls=(("call_s1", "structured_output", '{"name": "Ada"}'),)),
        Reply(tool_calls=(("call_s2", "structured_output", '{"name": "Ada", "age": 36}'),)),
    ],
    "stream_plain": [HELLO, HELLO],
    "stream_tool_call": [PARIS_CALL, PARIS_CALL],
    "malformed_arguments": [Reply(tool_calls=(("call_1", "get_weather", '{"city": "Par'),))],
    "cached_usage": [Reply(text="ok", input_tokens=1200, cached_tokens=1024)],
    "retry_then_answer": [Failure("server_error"), HELLO],
    "rate_limit": [Failure("rate_limit", retry_after="7")],
    "server_error": [Failure("server_error")],
    "context_window": [Failure("context_window")],
    "auth": [Failure("auth")],
    "bad_request": [Failure("bad_request")],
    "connection": [Failure("connection")],
    "timeout": [Failure("timeout")],
    "stream_cut": [Cut()],
    "garbled": [Failure("garbled")],
    "garbled_then_answer": [Failure("garbled"), HELLO],
}
