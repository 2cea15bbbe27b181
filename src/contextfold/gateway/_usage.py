"""The token usage the upstream reports in the answers the gateway relays, tallied for
``/metrics``: how much of what clients send is read from the provider's prompt cache.

A gateway that edits requests can break the provider's cache and raise the bill (users
of other gateways report 2 to 7 times); the cache-read share is how an operator sees
that it does not. The figures are the provider's, read from each answer as it passes:
an Anthropic message (``usage`` on the message, or on ``message_start`` and the
cumulative ``message_delta`` of a stream), an OpenAI chat completion (``usage``, on a
stream's last chunk when the client asked for it) or a Responses answer (``usage`` on
the response, or on ``response.completed``). Nothing else of an answer is kept.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

__all__ = ["AnswerUsage", "UsageKind", "answer_usage", "value_usage"]

UsageKind = str
"""``input`` (not read from the cache), ``cache_read``, ``cache_write`` or ``output``."""

_WHOLE_LIMIT = 4 << 20
"""Bytes of a JSON answer kept to read its usage; a larger answer is not tallied."""
_LINE_LIMIT = 1 << 20
"""Bytes of one stream line kept while it is incomplete; a longer line is skipped."""


def _number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tokens(usage: dict[str, Any]) -> Counter[UsageKind]:
    """The four kinds from one ``usage`` object of any of the three dialects."""
    out: Counter[UsageKind] = Counter()
    if "prompt_tokens" in usage or "input_tokens_details" in usage:  # OpenAI: cached in total
        total = _number(usage.get("prompt_tokens", usage.get("input_tokens")))
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        cached = _number(details.get("cached_tokens")) if isinstance(details, dict) else 0
        out["input"] = max(total - cached, 0)
        out["cache_read"] = min(cached, total)
        out["output"] = _number(usage.get("completion_tokens", usage.get("output_tokens")))
        return out
    out["input"] = _number(usage.get("input_tokens"))  # Anthropic: cache reads apart
    out["cache_read"] = _number(usage.get("cache_read_input_tokens"))
    out["cache_write"] = _number(usage.get("cache_creation_input_tokens"))
    out["output"] = _number(usage.get("output_tokens"))
    return out


def _found(value: Any) -> dict[str, Any] | None:
    """The ``usage`` of an answer or of a stream event, wherever the dialect puts it."""
    if not isinstance(value, dict):
        return None
    for holder in (value, value.get("message"), value.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            usage: dict[str, Any] = holder["usage"]
            return usage
    return None


def answer_usage(data: bytes) -> Counter[UsageKind]:
    """The usage a whole JSON answer reports (empty if none, or not JSON)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return Counter()
    return value_usage(value)


def value_usage(value: Any) -> Counter[UsageKind]:
    """The usage an answer already parsed reports (empty if none)."""
    usage = _found(value)
    return Counter() if usage is None else _tokens(usage)


class AnswerUsage:
    """Reads one relayed answer's usage as its bytes pass (:meth:`feed`), without changing
    them; :meth:`tokens` is the answer's usage at its end."""

    def __init__(self, content_type: str) -> None:
        self._stream = content_type.startswith("text/event-stream")
        self._json = "json" in content_type
        self._parts: list[bytes] = []
        self._size = 0
        self._line = b""
        self._fields: dict[str, Any] = {}
        """A stream's usage fields, the last value of each (Anthropic's ``message_delta``
        counts are cumulative; its ``message_start`` has the input's)."""

    def feed(self, data: bytes) -> None:
        """The next bytes of the answer, decoded."""
        if self._stream:
            self._lines(data)
        elif self._json and self._size <= _WHOLE_LIMIT:
            self._size += len(data)
            self._parts.append(data)

    def _lines(self, data: bytes) -> None:
        if b"\n" not in data:
            self._line = self._line + data if len(self._line) <= _LINE_LIMIT else b"\xff"
            return
        first, *middle, last = data.split(b"\n")
        lines = [self._line + first, *middle]
        self._line = last
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line:
                try:
                    usage = _found(json.loads(line[5:]))
                except (ValueError, RecursionError):
                    continue
                if usage is not None:
                    self._fields.update((k, v) for k, v in usage.items() if v is not None)

    def tokens(self) -> Counter[UsageKind]:
        """The answer's usage (empty if it reported none, or was too large to read)."""
        if self._stream:
            return _tokens(self._fields) if self._fields else Counter()
        if not self._parts or self._size > _WHOLE_LIMIT:
            return Counter()
        return answer_usage(b"".join(self._parts))
