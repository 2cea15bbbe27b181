"""The boundary between the provider SDKs (openai, anthropic) and contextfold.

Both SDKs are generated from the same template: their error classes have the same names
and meanings, so one converter serves both adapters. Every request goes through
:meth:`SDKBoundary.call` or :meth:`SDKBoundary.stream`, which raise the contextfold
exception *after* the ``except`` block: an SDK error whose text quotes the API key is then
neither the ``__cause__`` nor the ``__context__`` of what the caller sees.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from .._exceptions import ModelConnectionError, ModelError, ModelTimeoutError
from ..message import ToolChoice, ToolSpec
from ._http_errors import error_for_status, redact, transport_errors

__all__ = ["SDKBoundary", "check_tool_choice"]

T = TypeVar("T")


class SDKBoundary:
    """Runs one adapter's SDK requests and converts their failures.

    ``where`` names the model in every message (e.g. ``"Anthropic model 'claude-x'"``);
    ``secret`` is the API key, removed from every message and never chained.
    """

    def __init__(self, sdk: ModuleType, *, where: str, secret: str | None) -> None:
        self._sdk = sdk
        self.where = where
        self._secret = secret

    async def call(self, request: Awaitable[T], *, hint: str = "") -> T:
        """Await ``request`` (an SDK call), raising contextfold exceptions only.

        ``hint`` is added to the message of an HTTP error status: what may have caused it.
        """
        try:
            return await request
        except Exception as exc:
            error, cause = self._convert(exc, hint)
            if error is None:
                raise
        raise error from cause

    async def stream(
        self, open_stream: Callable[[], Awaitable[Any]], *, hint: str = ""
    ) -> AsyncGenerator[Any, None]:
        """The events of the SDK stream ``open_stream()`` opens, closed when done."""
        try:
            stream = await open_stream()
            async with stream:
                async for event in stream:
                    yield event
            return
        except Exception as exc:
            error, cause = self._convert(exc, hint)
            if error is None:
                raise
        raise error from cause

    def stream_cut(self) -> ModelConnectionError:
        """The error for a stream that ended without its final event."""
        return ModelConnectionError(
            f"{self.where}: the stream ended before the answer was complete"
        )

    def _convert(self, exc: Exception, hint: str) -> tuple[ModelError | None, BaseException | None]:
        """(the contextfold error for ``exc`` or None if it is not ours to convert, cause)."""
        sdk = self._sdk

        def say(text: str) -> str:
            return redact(f"{self.where}: {text}", self._secret)

        error: ModelError
        if isinstance(exc, sdk.APITimeoutError):
            error = ModelTimeoutError(say("request timed out"))
        elif isinstance(exc, sdk.APIConnectionError):
            error = ModelConnectionError(say(f"connection failed: {exc}"))
        elif isinstance(exc, sdk.APIStatusError):
            detail, code = _error_detail(exc.body, exc.message)
            kind = f" {code}" if code else ""
            error = error_for_status(
                exc.status_code,
                say(f"HTTP {exc.status_code}{kind}: {detail}{f' ({hint})' if hint else ''}"),
                headers=exc.response.headers,
                code=code,
            )
        elif isinstance(exc, sdk.APIError):  # e.g. an error event inside a stream
            error = ModelError(say(exc.message))
        elif isinstance(exc, transport_errors()[0]):
            # The SDKs wrap errors raised while sending, not while reading a streamed body.
            error = ModelTimeoutError(say("timed out reading the response"))
        elif isinstance(exc, transport_errors()[1]):
            error = ModelConnectionError(
                say(f"the connection failed mid-response ({type(exc).__name__})")
            )
        elif isinstance(exc, json.JSONDecodeError):
            # A 200 whose body is not JSON: in practice a proxy or load balancer garbled or
            # cut it, so it is classed as a connection failure, which the base class retries.
            error = ModelConnectionError(
                say(
                    f"the response body is not valid JSON ({exc.msg} at character {exc.pos}); "
                    "a proxy between here and the server may have garbled it"
                )
            )
        else:
            return None, None
        return error, None if _mentions(exc, self._secret) else exc


def _error_detail(body: object, fallback: str) -> tuple[str, str | None]:
    """(message, error code or type) of an error body.

    OpenAI's SDK passes the inner ``{"message", "type", "code"}``; Anthropic's the whole
    ``{"type": "error", "error": {"type", "message"}}``.
    """
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return fallback, None
    code = error.get("code") or error.get("type")
    return str(error.get("message") or fallback), str(code) if code else None


def _mentions(exc: BaseException, secret: str | None) -> bool:
    """Whether ``exc`` or anything chained to it quotes ``secret`` (text or error body)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while secret and todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if secret in str(current) or secret in repr(getattr(current, "body", None)):
            return True
        todo += [current.__cause__, current.__context__]
    return False


def check_tool_choice(choice: ToolChoice, tools: Sequence[ToolSpec]) -> None:
    """Reject a tool choice naming a tool that is not offered, before anything is sent."""
    if choice not in ("auto", "none", "required") and choice not in {t.name for t in tools}:
        raise ValueError(
            f"tool_choice {choice!r} is not one of the tools offered: "
            f"{sorted(t.name for t in tools)}"
        )
