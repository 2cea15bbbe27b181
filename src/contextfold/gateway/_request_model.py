"""The request's own model as a library chat model, so a ``ModelSummarizer`` can write a
compaction's summary with it (Anthropic summarizes with the request's model).

Each call goes through the gateway's upstream client with the client's own headers
(credentials included, forwarded and not kept: the model lives for one compaction).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .._exceptions import BadRequestError, ModelConnectionError, ServerError
from ..message import Msg, ToolChoice, ToolSpec, Usage, anthropic_request, from_anthropic_message
from ..model import ChatModelBase, ChatResponse
from ..token import TokenCounter
from ._upstream import Upstream, UpstreamFailure

__all__ = ["RequestModel"]


class RequestModel(ChatModelBase):
    """``model_name`` behind the gateway's upstream, called with ``headers``."""

    def __init__(
        self,
        upstream: Upstream,
        model_name: str,
        *,
        headers: Iterable[tuple[str, str]],
        counter: TokenCounter,
        drop_betas: frozenset[str] = frozenset(),
        max_tokens: int = 8192,
        context_size: int = 200_000,
    ) -> None:
        super().__init__(
            model_name, context_size=context_size, max_retries=0, token_counter=counter
        )
        self._upstream = upstream
        self._headers = list(headers)
        self._drop_betas = drop_betas
        self.max_tokens = max_tokens
        self.spent = Usage()
        """What the calls so far cost, as the upstream reported it (the compaction's
        ``usage.iterations`` entry)."""

    path = "/v1/messages"
    """Where the model is called upstream."""

    def _request(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> dict[str, Any]:
        """The request's body after ``model``, in the route's shape."""
        return {"max_tokens": self.max_tokens, **anthropic_request(messages, tools, tool_choice)}

    def _response(self, answer: Any) -> ChatResponse:
        """The upstream's parsed answer as the library's response, or
        ``ModelConnectionError`` when it is not one."""
        try:
            msg = from_anthropic_message(answer)
        except ValueError as exc:
            raise ModelConnectionError(f"the upstream's answer is not a message: {exc}") from None
        stop = answer.get("stop_reason") if isinstance(answer, dict) else None
        return ChatResponse(
            content=list(msg.blocks()),
            usage=msg.usage,
            stop_reason=stop if isinstance(stop, str) else None,
            model=self.model_name,
        )

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        """One call on :attr:`path`, for every route: the body of :meth:`_request`, the
        answer read by :meth:`_response`, its usage added to :attr:`spent`."""
        body = {"model": self.model_name, **self._request(messages, tools, tool_choice)}
        raw = await self._post(self.path, body)
        try:
            answer = json.loads(raw)
        except ValueError as exc:
            raise ModelConnectionError(f"the upstream's answer is not JSON: {exc}") from None
        response = self._response(answer)
        if response.usage is not None:
            self._spend(response.usage)
        return response

    async def _post(self, path: str, body: dict[str, object]) -> bytes:
        """``body`` sent to ``path`` upstream with the client's headers; the answer's bytes,
        or the library's error for a failed call."""
        try:
            response = await self._upstream.open(
                "POST",
                path,
                query="",
                headers=self._headers,
                body=json.dumps(body, ensure_ascii=False).encode(),
                drop_betas=self._drop_betas,
            )
            raw = await self._upstream.read(response, tally=False)  # summary_tokens has it
        except UpstreamFailure as failure:
            raise ModelConnectionError(failure.message) from None
        if response.status_code >= 500:
            raise ServerError(f"the upstream answered {response.status_code}")
        if response.status_code >= 400:
            raise BadRequestError(f"the upstream answered {response.status_code}")
        return raw

    def _spend(self, usage: Usage) -> None:
        self.spent = Usage(
            input_tokens=self.spent.input_tokens + usage.input_tokens,
            output_tokens=self.spent.output_tokens + usage.output_tokens,
            cache_read_tokens=self.spent.cache_read_tokens + usage.cache_read_tokens,
            cache_write_tokens=self.spent.cache_write_tokens + usage.cache_write_tokens,
        )
