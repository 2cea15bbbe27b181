"""The request's own model behind a Chat Completions upstream, as a library chat model,
so a ``ModelSummarizer`` writes transparent mode's summaries on ``/v1/chat/completions``
with it when the gateway runs with ``--summarizer model``.

Each call is a ``POST /v1/chat/completions`` through the gateway's upstream client with
the client's own headers (credentials included, forwarded and not kept), not streamed.
The answer's length is bounded with the field the client itself used (``max_tokens`` or
``max_completion_tokens``): the client knows which one its upstream accepts (OpenAI's
reasoning models refuse ``max_tokens``; some compatible servers ignore the other).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._exceptions import ModelConnectionError
from ..message import Msg, ToolChoice, ToolSpec, Usage, from_openai_message, openai_request
from ..model import ChatResponse
from ._request_model import RequestModel

__all__ = ["ChatRequestModel", "limit_field"]

LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")


def limit_field(body: dict[str, Any]) -> str:
    """The output-length field of the client's request (``max_completion_tokens``, the
    current one, when it sent neither)."""
    return next((f for f in LIMIT_FIELDS if f in body), LIMIT_FIELDS[0])


def _usage(reported: Any) -> Usage | None:
    if not isinstance(reported, dict):
        return None
    details = reported.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        input_tokens=int(reported.get("prompt_tokens") or 0),
        output_tokens=int(reported.get("completion_tokens") or 0),
        cache_read_tokens=int(cached or 0),
    )


class ChatRequestModel(RequestModel):
    """``model_name`` behind the gateway's Chat Completions upstream, called with
    ``headers``; ``limit`` names the answer-length field (see the module docstring)."""

    limit: str = LIMIT_FIELDS[0]

    path = "/v1/chat/completions"

    def _request(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> dict[str, Any]:
        return {self.limit: self.max_tokens, **openai_request(messages, tools, tool_choice)}

    def _response(self, answer: Any) -> ChatResponse:
        try:
            choice = answer["choices"][0]
            msg = from_openai_message(choice["message"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelConnectionError(
                f"the upstream's answer is not a completion: {type(exc).__name__}"
            ) from None
        finish = choice.get("finish_reason")
        stop = {"tool_calls": "tool_use", "length": "max_tokens"}.get(finish, "end_turn")
        return ChatResponse(
            content=list(msg.blocks()),
            usage=_usage(answer.get("usage")),
            stop_reason=stop,
            model=self.model_name,
        )
