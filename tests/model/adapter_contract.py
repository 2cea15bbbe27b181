"""The adapter contract: behaviour every chat model adapter must show.

A backend writes one test class that inherits :class:`AdapterContract` and overrides the
``make_model`` fixture: a function from a scenario name (a key of
``model_scenarios.SCENARIOS``) to a model that will answer that scenario. Scripted backends
(fakes, ScriptedModel) play the scenario's turns; a real server just answers, so tests
assert on structure, never on wording.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

import jsonschema
import pytest

from contextfold import _exceptions as errors
from contextfold.message import ContentBlock, Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ChatModelBase, ChatResponse, ResponseCompleted, TextDelta

from .model_scenarios import PERSON_SCHEMA, SECRET_KEY, WEATHER

MakeModel = Callable[[str], ChatModelBase]

ERROR_KINDS: dict[str, type[errors.ModelError]] = {
    "rate_limit": errors.RateLimitError,
    "server_error": errors.ServerError,
    "context_window": errors.ContextWindowExceededError,
    "auth": errors.AuthenticationError,
    "bad_request": errors.BadRequestError,
    "connection": errors.ModelConnectionError,
    "timeout": errors.ModelTimeoutError,
}


def user(text: str) -> list[Msg]:
    return [Msg("user", text, "user")]


def without_ids(content: list[ContentBlock]) -> list[dict[str, Any]]:
    """Content for comparison; servers may mint different call ids per request."""
    return [
        b.model_dump(exclude={"id"}) if isinstance(b, ToolCallBlock) else b.model_dump()
        for b in content
    ]


async def collect(model: ChatModelBase, messages: list[Msg], **kwargs: Any) -> list[Any]:
    return [event async for event in model.stream(messages, **kwargs)]


async def ask(model: ChatModelBase, text: str, *, stream: bool) -> None:
    """One request, streamed or whole, for tests that only look at how it fails."""
    if stream:
        await collect(model, user(text))
    else:
        await model.generate(user(text))


class AdapterContract:
    """Inherit and override :meth:`make_model`; set the flags the backend needs."""

    scripted: ClassVar[bool] = True
    """The backend plays scripted turns (a fake or ScriptedModel), not a real model."""
    supports_parallel_tool_calls: ClassVar[bool] = True
    streams_usage: ClassVar[bool] = True
    streams_tool_deltas: ClassVar[bool] = True
    error_kinds: ClassVar[frozenset[str]] = frozenset(ERROR_KINDS)
    can_cut_streams: ClassVar[bool] = True
    speaks_http: ClassVar[bool] = False
    """The backend is an HTTP adapter, so a fake server can garble its answers."""

    @pytest.fixture
    def make_model(self) -> MakeModel:
        raise NotImplementedError("override the make_model fixture")

    def error_messages(self, kind: str) -> list[Msg]:
        """The request that provokes error ``kind``; real servers may need a real cause."""
        return user("Hello")

    def _require_scripted(self) -> None:
        if not self.scripted:
            pytest.skip("needs a scripted backend")

    # -- plain answers -------------------------------------------------------------------

    async def test_plain_answer_is_text_without_tool_calls(self, make_model: MakeModel) -> None:
        response = await make_model("plain").generate(user("Say hello."))
        assert response.text.strip()
        assert response.tool_calls == []
        assert response.stop_reason in {"end_turn", "max_tokens"}

    async def test_usage_is_reported_as_token_counts(self, make_model: MakeModel) -> None:
        response = await make_model("plain").generate(user("Say hello."))
        assert response.usage is not None
        assert response.usage.input_tokens > 0
        assert response.usage.output_tokens > 0

    async def test_cached_prompt_tokens_are_reported(self, make_model: MakeModel) -> None:
        self._require_scripted()
        response = await make_model("cached_usage").generate(user("Again."))
        assert response.usage is not None
        assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (1200, 1024)

    # -- tools -----------------------------------------------------------------------------

    async def test_forced_tool_call_is_parsed(self, make_model: MakeModel) -> None:
        response = await make_model("tool_round_trip").generate(
            user("What is the weather in Paris?"), tools=[WEATHER], tool_choice="get_weather"
        )
        calls = response.tool_calls
        assert [c.name for c in calls] == ["get_weather"]
        assert calls[0].id
        assert calls[0].input_error is None
        jsonschema.validate(calls[0].input, WEATHER.parameters)
        assert response.stop_reason == "tool_use"

    async def test_tool_result_round_trip_gets_an_answer(self, make_model: MakeModel) -> None:
        model = make_model("tool_round_trip")
        history = user("What is the weather in Paris?")
        first = await model.generate(history, tools=[WEATHER], tool_choice="get_weather")
        call = first.tool_calls[0]
        history += [
            first.to_msg("assistant"),
            Msg(
                "tool", [ToolResultBlock(id=call.id, name=call.name, output="Sunny, 24 C")], "user"
            ),
        ]
        second = await model.generate(history, tools=[WEATHER], tool_choice="none")
        assert second.text.strip()
        assert second.tool_calls == []

    async def test_parallel_tool_calls_keep_order_and_ids(self, make_model: MakeModel) -> None:
        if not self.supports_parallel_tool_calls:
            pytest.skip("backend has no parallel tool calls")
        response = await make_model("parallel_tool_calls").generate(
            user("Weather in Paris and Rome?"), tools=[WEATHER], tool_choice="required"
        )
        calls = response.tool_calls
        assert len(calls) >= 2
        assert len({c.id for c in calls}) == len(calls)
        if self.scripted:
            assert [c.input["city"] for c in calls] == ["Paris", "Rome"]
            assert response.text == "Checking both."

    async def test_structured_output_validates_against_schema(self, make_model: MakeModel) -> None:
        result = await make_model("structured").structured(
            user("Invent a person with a name and an age."), PERSON_SCHEMA
        )
        jsonschema.validate(result, PERSON_SCHEMA)

    async def test_structured_output_retries_invalid_output(self, make_model: MakeModel) -> None:
        self._require_scripted()
        result = await make_model("structured_retry").structured(user("A person."), PERSON_SCHEMA)
        assert result == {"name": "Ada", "age": 36}

    async def test_malformed_tool_arguments_become_input_error(self, make_model: MakeModel) -> None:
        self._require_scripted()
        events = await collect(make_model("malformed_arguments"), user("Weather?"), tools=[WEATHER])
        call = events[-1].response.tool_calls[0]
        assert call.input_error
        assert call.raw_input == '{"city": "Par'

    # -- streaming -------------------------------------------------------------------------

    async def test_stream_ends_with_one_completed_equal_to_generate(
        self, make_model: MakeModel
    ) -> None:
        model = make_model("stream_plain")
        whole = await model.generate(user("Say hello."))
        events = await collect(model, user("Say hello."))
        assert isinstance(events[-1], ResponseCompleted)
        assert sum(isinstance(e, ResponseCompleted) for e in events) == 1
        assert without_ids(events[-1].response.content) == without_ids(whole.content)

    async def test_stream_text_deltas_join_to_final_text(self, make_model: MakeModel) -> None:
        events = await collect(make_model("stream_plain"), user("Say hello."))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text == events[-1].response.text
        assert text.strip()

    async def test_streamed_tool_call_equals_generate(self, make_model: MakeModel) -> None:
        model = make_model("stream_tool_call")
        ask = user("What is the weather in Paris?")
        whole = await model.generate(ask, tools=[WEATHER], tool_choice="get_weather")
        events = await collect(model, ask, tools=[WEATHER], tool_choice="get_weather")
        final: ChatResponse = events[-1].response
        assert without_ids(final.content) == without_ids(whole.content)
        assert final.stop_reason == "tool_use"
        if self.streams_tool_deltas:
            deltas = [e for e in events if type(e).__name__ == "ToolCallDelta"]
            assert json.loads("".join(d.arguments for d in deltas)) == final.tool_calls[0].input

    async def test_stream_reports_usage(self, make_model: MakeModel) -> None:
        if not self.streams_usage:
            pytest.skip("backend does not report usage when streaming")
        events = await collect(make_model("stream_plain"), user("Say hello."))
        usage = events[-1].response.usage
        assert usage is not None
        assert usage.input_tokens > 0

    async def test_stream_cut_midway_raises_model_error(self, make_model: MakeModel) -> None:
        if not self.can_cut_streams:
            pytest.skip("backend cannot cut a stream")
        seen: list[Any] = []

        async def consume() -> None:
            async for event in make_model("stream_cut").stream(user("Talk.")):
                seen.append(event)

        with pytest.raises(errors.ModelConnectionError):
            await consume()
        assert seen  # the failure came after part of the answer, so it was not retried
        assert not any(isinstance(e, ResponseCompleted) for e in seen)

    # -- errors ----------------------------------------------------------------------------

    async def test_garbled_body_is_retried_as_a_connection_failure(
        self, make_model: MakeModel
    ) -> None:
        if not self.speaks_http:
            pytest.skip("needs an HTTP backend")
        model = make_model("garbled_then_answer")
        model.max_retries = 1
        response = await model.generate(user("Hello"))
        assert response.text == "Hello! How can I help?"

    @pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
    async def test_garbled_body_raises_connection_error(
        self, make_model: MakeModel, stream: bool
    ) -> None:
        if not self.speaks_http:
            pytest.skip("needs an HTTP backend")
        model = make_model("garbled")
        model.max_retries = 0
        with pytest.raises(errors.ModelConnectionError):
            await ask(model, "Hello", stream=stream)

    @pytest.mark.parametrize("kind", sorted(ERROR_KINDS))
    async def test_provider_error_maps_to_contextfold_error(
        self, make_model: MakeModel, kind: str
    ) -> None:
        if kind not in self.error_kinds:
            pytest.skip(f"backend cannot produce {kind}")
        model = make_model(kind)
        model.max_retries = 0
        with pytest.raises(ERROR_KINDS[kind]) as info:
            await model.generate(self.error_messages(kind))
        if kind == "bad_request":
            assert not isinstance(info.value, errors.ContextWindowExceededError)

    async def test_rate_limit_carries_retry_after(self, make_model: MakeModel) -> None:
        self._require_scripted()
        model = make_model("rate_limit")
        model.max_retries = 0
        with pytest.raises(errors.RateLimitError) as info:
            await model.generate(user("Hello"))
        assert info.value.retry_after == 7.0

    async def test_transient_server_error_is_retried(self, make_model: MakeModel) -> None:
        self._require_scripted()
        model = make_model("retry_then_answer")
        model.max_retries, model.retry_base_delay = 1, 0.0
        response = await model.generate(user("Hello"))
        assert response.text == "Hello! How can I help?"

    async def test_api_key_never_appears_in_errors_or_logs(
        self, make_model: MakeModel, caplog: pytest.LogCaptureFixture
    ) -> None:
        self._require_scripted()
        model = make_model("auth")
        model.max_retries = 0
        caplog.set_level(logging.DEBUG)
        with pytest.raises(errors.AuthenticationError) as info:
            await model.generate(user("Hello"))
        chain: list[BaseException] = []
        exc: BaseException | None = info.value
        while exc is not None:
            chain.append(exc)
            # what a traceback shows: the cause, else the unsuppressed context
            exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        assert all(SECRET_KEY not in str(e) for e in chain)
        assert SECRET_KEY not in caplog.text

    @pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
    async def test_api_key_is_in_no_chained_exception(
        self, make_model: MakeModel, stream: bool
    ) -> None:
        self._require_scripted()
        model = make_model("auth")
        model.max_retries = 0
        with pytest.raises(errors.AuthenticationError) as info:
            await ask(model, "Hello", stream=stream)
        # Every exception reachable from the error, suppressed context included: a
        # debugger or error reporter may show any of them.
        seen: list[BaseException] = []
        todo: list[BaseException | None] = [info.value]
        while todo:
            exc = todo.pop()
            if exc is None or any(exc is s for s in seen):
                continue
            seen.append(exc)
            todo += [exc.__cause__, exc.__context__]
        assert all(SECRET_KEY not in f"{e} {e!r} {getattr(e, 'body', '')}" for e in seen)
