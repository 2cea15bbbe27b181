"""Shared pieces of the adapters' error mapping: HTTP status to our exception tree."""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from functools import cache

from .._exceptions import (
    AuthenticationError,
    BadRequestError,
    ContextWindowExceededError,
    ModelError,
    RateLimitError,
    ServerError,
)

__all__ = [
    "error_for_status",
    "is_context_overflow",
    "parse_retry_after",
    "redact",
    "transport_errors",
]

# Wordings providers use when a prompt does not fit: OpenAI's error code, Anthropic's
# message, llama.cpp's server and llama-cpp-python's ValueError.
_OVERFLOW = re.compile(
    r"context_length_exceeded|prompt is too long|exceeds the available context size"
    r"|context length|context window|maximum context",
    re.IGNORECASE,
)
# Errors sent as an SSE ``error`` event arrive with HTTP 200; their type says what failed.
_STREAM_ERROR_TYPES: dict[str, type[ModelError]] = {
    "overloaded_error": ServerError,
    "api_error": ServerError,
    "rate_limit_error": RateLimitError,
}
_KEYLIKE = re.compile(r"\b(sk-(?:ant-)?[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-]{8,}")


def is_context_overflow(*texts: str | None) -> bool:
    """Whether an error code or message says the request exceeded the context window."""
    return any(t and _OVERFLOW.search(t) for t in texts)


def redact(text: str, secret: str | None) -> str:
    """``text`` without the API key (and without anything that looks like one)."""
    if secret:
        text = text.replace(secret, "***")
    return _KEYLIKE.sub(r"\1***", text)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def error_for_status(
    status: int,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
) -> ModelError:
    """The contextfold exception for an HTTP error status (``message`` already redacted).

    A status below 400 is an error event inside a 200 stream, classed by its ``code``.
    """
    if status < 400:
        return _STREAM_ERROR_TYPES.get(code or "", ModelError)(message)
    if status in (401, 403):
        return AuthenticationError(message, status_code=status)
    if status == 429:
        return RateLimitError(
            message, status_code=status, retry_after=parse_retry_after(headers or {})
        )
    if status >= 500:
        return ServerError(message, status_code=status)
    if status in (400, 413) and is_context_overflow(code, message):
        return ContextWindowExceededError(message, status_code=status)
    return BadRequestError(message, status_code=status)


@cache
def transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, any transport failure) of the HTTP libraries the SDKs use, for ``except``.

    SDKs wrap errors raised while sending a request, but not those raised while reading
    a streamed body, so those surface as raw ``httpx``/``httpx2`` errors.
    """
    timeouts: list[type[BaseException]] = []
    transports: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transports.append(module.TransportError)
    return tuple(timeouts), tuple(transports)
