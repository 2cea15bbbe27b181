"""The model interface every adapter implements."""

from __future__ import annotations

import asyncio
import json
import random
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import jsonschema

from .._exceptions import (
    EmptyResponseError,
    ModelConnectionError,
    RateLimitError,
    ServerError,
    StructuredOutputError,
)
from .._logging import logger
from .._structural import implements
from ..message import Msg, TextBlock, ToolChoice, ToolSpec
from ..token import UsageCalibration
from ._response import (
    ChatResponse,
    ModelStreamEvent,
    ResponseCompleted,
    StructuredOutput,
    TextDelta,
)

if TYPE_CHECKING:
    from ..token import TokenCounter

__all__ = [
    "DEFAULT_STRUCTURED_DESCRIPTION",
    "ChatModelBase",
    "ModelCall",
    "ModelCallListener",
    "StructuredAnswer",
]

_RETRYABLE = (RateLimitError, ServerError, ModelConnectionError)

DEFAULT_STRUCTURED_DESCRIPTION = "Return the result as the arguments of this tool."
"""What the structured-output tool says when the caller gives no description."""


@dataclass(frozen=True)
class ModelCall:
    """One completed model call: what was sent and what came back."""

    model: str
    messages: Sequence[Msg]
    tools: Sequence[ToolSpec]
    tool_choice: ToolChoice | None
    response: ChatResponse


ModelCallListener = Callable[[ModelCall], None]
"""Called after every completed call of a model (see :meth:`ChatModelBase.add_listener`)."""


class ChatModelBase(ABC):
    """An async chat model.

    Adapters implement :meth:`_generate` (and optionally :meth:`_stream`); this class adds
    retries with backoff for rate limits, 5xx and connection errors (``retry_after`` is
    honoured), structured output through a forced tool call, and a token counter.
    Adapters must turn their SDK's errors into :mod:`contextfold` exceptions.
    """

    model_name: str
    context_size: int
    """The model's context window in tokens."""
    _structured_retry: ClassVar[str] = (
        "Your output was invalid ({problem}). "
        "Call {name} again with arguments that match its schema exactly."
    )
    """The note that asks for another attempt; ``{problem}`` is the validation error."""
    _structured_text_retry: ClassVar[str] = (
        "Your output was invalid ({problem}). "
        "Answer again with the JSON object alone, calling no tool, "
        "its fields matching the schema exactly."
    )
    """The same note after an answer given as text (the schema's tool is not on offer)."""

    def __init__(
        self,
        model_name: str,
        *,
        context_size: int,
        max_retries: int = 2,
        retry_base_delay: float = 0.5,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if context_size <= 0:
            raise ValueError(f"context_size must be positive, got {context_size}")
        self._listeners: list[ModelCallListener] = []
        self.model_name = model_name
        self.context_size = context_size
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self._token_counter = token_counter

    @property
    def cache_lifetime(self) -> float | None:
        """Seconds the provider keeps a prompt prefix cached after its last use (``None``:
        no lifetime, or no cache to keep warm); idle compaction starts before it runs out."""
        return None

    @property
    def token_counter(self) -> TokenCounter:
        """The counter that matches this model's tokenizer and framing."""
        if self._token_counter is None:
            from ..token import counter_for_model

            self._token_counter = counter_for_model(self.model_name)
        return self._token_counter

    @abstractmethod
    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        """One provider call, no retries. Raise contextfold exceptions only."""

    async def _stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> AsyncIterator[ModelStreamEvent]:
        """Stream one provider call. The default wraps :meth:`_generate`."""
        response = await self._generate(messages, tools=tools, tool_choice=tool_choice)
        if response.text:
            yield TextDelta(text=response.text)
        yield ResponseCompleted(response=response)

    async def generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> ChatResponse:
        """Call the model, retrying transient failures."""
        attempt = 0
        while True:
            try:
                response = await self._generate(messages, tools=tools, tool_choice=tool_choice)
            except _RETRYABLE as exc:
                attempt += 1
                if attempt > self.max_retries:
                    raise
                await self._backoff(attempt, exc)
                continue
            if not response.content:
                raise EmptyResponseError(f"{self.model_name} returned an empty response")
            self._completed(messages, tools, tool_choice, response)
            return response

    __call__ = generate

    async def stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> AsyncIterator[ModelStreamEvent]:
        """Stream the answer; the last event is :class:`ResponseCompleted`.

        Transient failures are retried only before the first event was yielded; a stream
        cut after that raises, since the caller has already seen part of the answer.
        """
        attempt = 0
        while True:
            started = False
            try:
                async for event in self._stream(messages, tools=tools, tool_choice=tool_choice):
                    started = True
                    if isinstance(event, ResponseCompleted):
                        self._completed(messages, tools, tool_choice, event.response)
                    yield event
                return
            except _RETRYABLE as exc:
                attempt += 1
                if started or attempt > self.max_retries:
                    raise
                await self._backoff(attempt, exc)

    def add_listener(self, listener: ModelCallListener) -> Callable[[], None]:
        """Call ``listener`` after every completed call (structured-output attempts
        included); returns a function that removes it. For recording requests as sent."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _completed(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
        response: ChatResponse,
    ) -> None:
        # Counters without a tokenizer (CalibratedCounter) learn from reported usage.
        counter = self.token_counter
        if implements(counter, UsageCalibration) and response.usage is not None:
            cast(UsageCalibration, counter).observe(messages, tools, response.usage)
        if self._listeners:
            call = ModelCall(self.model_name, list(messages), list(tools), tool_choice, response)
            for listener in list(self._listeners):
                listener(call)

    async def _backoff(self, attempt: int, exc: Exception) -> None:
        delay = self.retry_base_delay * (2 ** (attempt - 1)) * (0.5 + random.random())
        if isinstance(exc, RateLimitError) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        logger.warning(
            "model %s: %s; retry %d/%d in %.1fs",
            self.model_name,
            type(exc).__name__,
            attempt,
            self.max_retries,
            delay,
        )
        await asyncio.sleep(delay)

    async def structured(
        self,
        messages: Sequence[Msg],
        schema: dict[str, Any],
        *,
        name: str = "structured_output",
        description: str = DEFAULT_STRUCTURED_DESCRIPTION,
        max_attempts: int = 3,
    ) -> dict[str, Any]:
        """The value of :meth:`structured_output`: output matching a JSON schema."""
        output = await self.structured_output(
            messages, schema, name=name, description=description, max_attempts=max_attempts
        )
        return output.value

    async def structured_output(
        self,
        messages: Sequence[Msg],
        schema: dict[str, Any],
        *,
        name: str = "structured_output",
        description: str = DEFAULT_STRUCTURED_DESCRIPTION,
        max_attempts: int = 3,
        retry_on: tuple[type[Exception], ...] = (),
        offered: Sequence[ToolSpec] | None = None,
    ) -> StructuredOutput:
        """Output matching a JSON schema, and the attempts it took.

        Each attempt is one :meth:`_structured_attempt` (a forced call of a tool named
        ``name`` whose parameters are ``schema``). With ``offered`` (the tools of the
        conversation ``messages`` continue), each attempt is a
        :meth:`_structured_text_attempt` instead: the same tools stay on offer and the
        answer is the JSON object as text, so the request extends the conversation's own
        and a provider's prompt cache still holds its prefix (the caller's last message
        must ask for that JSON). An invalid answer is fed back to the
        model with its validation error and retried, up to ``max_attempts`` attempts in
        all; then :class:`StructuredOutputError` is raised, with the ``attempts`` made.
        When a text answer ignored the format (it called a tool, or held no JSON), the
        attempts after it force the tool instead: one prompt-cache miss buys an answer the
        provider (or llama.cpp's grammar) constrains. A model that ignored the format once
        mostly ignores it again, so another text attempt is wasted, and on llama-cpp-python's
        ``chatml-function-calling`` server it always is: a text answer there can only name a
        function or end (its grammar for a message), and that path ignores ``max_tokens``
        (SmolLM2 ran on for 1,631 tokens, to the end of the window). An exception of a type in
        ``retry_on`` (beyond the transient errors :meth:`generate` retries itself) also
        uses up an attempt; when the last attempt ends in one, it is raised as is, all
        ``max_attempts`` having been made.
        """
        validator = jsonschema.Draft202012Validator(schema)
        tool = ToolSpec(name=name, description=description, parameters=schema)
        feedback: list[Msg] = []
        problem: str | None = "no attempt made"
        attempts = 0
        ignored_format = False

        for attempts in range(1, max_attempts + 1):
            try:
                if offered is None or ignored_format:
                    answer = await self._structured_attempt(messages, feedback, tool)
                else:
                    answer = await self._structured_text_attempt(messages, feedback, tool, offered)
            except retry_on as exc:
                if attempts == max_attempts:
                    raise
                logger.info(
                    "structured output attempt %d/%d failed: %s: %s",
                    attempts,
                    max_attempts,
                    type(exc).__name__,
                    exc,
                )
                continue
            problem = answer.problem or _schema_problem(validator, answer.value)
            if problem is None:
                return StructuredOutput(value=dict(answer.value), attempts=attempts)
            logger.info(
                "structured output attempt %d/%d invalid: %s", attempts, max_attempts, problem
            )
            ignored_format = ignored_format or answer.ignored_format
            forced = offered is None or ignored_format
            retry = self._structured_retry if forced else self._structured_text_retry
            note = retry.format(problem=problem, name=name)
            feedback = [*feedback, *answer.shown, Msg("system", [TextBlock(text=note)], "user")]
        raise StructuredOutputError(
            f"{self.model_name}: no valid {name!r} output after {attempts} "
            f"attempt{'' if attempts == 1 else 's'}: {problem}",
            attempts=attempts,
        )

    async def _structured_attempt(
        self, messages: Sequence[Msg], feedback: Sequence[Msg], tool: ToolSpec
    ) -> StructuredAnswer:
        """One structured answer, not yet validated: here, a forced call of ``tool``.

        ``feedback`` holds what the earlier attempts left for the model (their answers
        when :attr:`StructuredAnswer.shown`, and the notes with their errors).
        """
        response = await self.generate([*messages, *feedback], tools=[tool], tool_choice=tool.name)
        calls = [c for c in response.tool_calls if c.name == tool.name]
        if calls and calls[0].input_error is None:
            return StructuredAnswer(calls[0].input)
        lenient = _lenient_object(calls[0].raw_input) if calls else None
        if lenient is not None:
            return StructuredAnswer(lenient)
        if calls:
            return StructuredAnswer(
                problem=f"arguments were not a JSON object: {calls[0].input_error}"
            )
        value = _json_object_in_text(response.text)
        if value is None:
            return StructuredAnswer(problem=f"the model did not call {tool.name!r}")
        return StructuredAnswer(value)

    async def _structured_text_attempt(
        self,
        messages: Sequence[Msg],
        feedback: Sequence[Msg],
        tool: ToolSpec,
        offered: Sequence[ToolSpec],
    ) -> StructuredAnswer:
        """One structured answer given as text, with the conversation's ``offered`` tools
        on offer (not forced), so the request keeps the conversation's prefix."""
        response = await self.generate([*messages, *feedback], tools=offered)
        value = _json_object_in_text(response.text)
        if value is not None:
            return StructuredAnswer(value)
        if response.tool_calls:
            return StructuredAnswer(
                problem=f"called {response.tool_calls[0].name!r} instead of answering with "
                "the JSON object",
                ignored_format=True,
            )
        return StructuredAnswer(problem="the answer held no JSON object", ignored_format=True)


@dataclass(frozen=True)
class StructuredAnswer:
    """One answer to a structured-output request, before it is checked against the schema."""

    value: Any = None
    """The parsed JSON, if the answer had any."""
    problem: str | None = None
    """Why there is no value to check."""
    shown: tuple[Msg, ...] = ()
    """The answer as messages, for a retry to show the model what it wrote."""
    ignored_format: bool = False
    """The model answered outside the format asked (a tool call, or prose without JSON),
    rather than with JSON that broke the schema."""


def _schema_problem(validator: jsonschema.Draft202012Validator, candidate: Any) -> str | None:
    """Up to five of ``candidate``'s schema violations as one line; ``None`` when it is valid."""
    errors = sorted(validator.iter_errors(candidate), key=lambda e: list(e.path))
    if not errors:
        return None
    return "; ".join(f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors[:5])


def _json_object_in_text(text: str) -> dict[str, Any] | None:
    """Some models answer a forced tool call with JSON in plain text; accept that."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    return _lenient_object(text[start : end + 1])


def _lenient_object(text: str | None) -> dict[str, Any] | None:
    """``text`` as a JSON object, raw control characters inside its strings allowed.

    llama.cpp's grammar for a JSON string admits any character but a quote or a
    backslash, so a grammar-constrained answer can hold a raw newline in a string: strict
    JSON rejects it, though what it means is plain, and the structured attempt (often the
    forced one that paid a prompt-cache miss) was wasted. The schema still checks the value.
    """
    if text is None:
        return None
    try:
        value = json.loads(text, strict=False)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
