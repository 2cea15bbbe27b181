"""The boundary between the provider SDKs (openai, anthropic) and contextfold.

Both SDKs are generated from the same template: their clients take the same options and
their error classes have the same names and meanings, so one base class
(:class:`SDKChatModel`) builds both adapters' clients and one converter serves both.
Every request goes through :meth:`SDKBoundary.call` or :meth:`SDKBoundary.stream`, which
raise the contextfold exception *after* the ``except`` block: an SDK error whose text
quotes the API key is then neither the ``__cause__`` nor the ``__context__`` of what the
caller sees.
"""

from __future__ import annotations

import json
import os
from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from .._exceptions import (
    AuthenticationError,
    MissingDependencyError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
)
from ..message import ToolChoice, ToolSpec
from ._base import ChatModelBase
from ._http_errors import error_for_status, redact, transport_errors

if TYPE_CHECKING:
    from ..token import TokenCounter

__all__ = ["SDKBoundary", "SDKChatModel", "check_tool_choice", "sdk_import"]

T = TypeVar("T")


class _Client(Protocol):
    @property
    def api_key(self) -> str | None: ...


ClientT = TypeVar("ClientT", bound=_Client)


@contextmanager
def sdk_import(package: str) -> Iterator[None]:
    """Import a provider SDK in this block; if it is missing, say which extra to install.

    The extra has the package's name (``openai``, ``anthropic``).
    """
    try:
        yield
    except ImportError as exc:
        raise MissingDependencyError(package, extra=package) from exc


class SDKChatModel(ChatModelBase, Generic[ClientT]):
    """A model behind a provider SDK client: the constructor both adapters share.

    Without ``client``, one is built from ``api_key`` (else the provider's environment
    variable), ``base_url``, ``timeout`` and ``http_client``, with the SDK's own retries
    off: the base class retries, and both would multiply the attempts. Every request goes
    through ``self._sdk`` (an :class:`SDKBoundary` that knows the key, to hide it).
    ``context_size`` and ``max_tokens`` default per model; extra keyword arguments are
    sent with every request.
    """

    _sdk_module: ClassVar[ModuleType]
    _client_class: ClassVar[Callable[..., Any]]
    _provider: ClassVar[str]
    """How messages name the provider: ``"OpenAI"``."""
    _key_variable: ClassVar[str]
    """The environment variable that holds the API key."""

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        context_size: int | None = None,
        client: ClientT | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout: float | None = 600.0,
        http_client: Any = None,
        max_retries: int = 2,
        retry_base_delay: float = 0.5,
        token_counter: TokenCounter | None = None,
        **kwargs: Any,
    ) -> None:
        if context_size is None:
            context_size = self._default_context_size(model_name)
        super().__init__(
            model_name,
            context_size=context_size,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            token_counter=token_counter,
        )
        if client is None:
            client = self._client_class(
                api_key=api_key or os.environ.get(self._key_variable) or self._no_key(base_url),
                base_url=base_url,
                timeout=timeout,
                max_retries=0,
                http_client=http_client,
            )
        self._client: ClientT = client
        self._base_url = base_url
        self._sdk = SDKBoundary(self._sdk_module, where=self._where(), secret=client.api_key)
        self.max_tokens = self._default_max_tokens(model_name) if max_tokens is None else max_tokens
        self.temperature = temperature
        self.extra_params = kwargs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r})"

    @abstractmethod
    def _default_context_size(self, model_name: str) -> int:
        """The context window when none is given; ``ValueError`` if it is unknown."""

    def _default_max_tokens(self, model_name: str) -> int | None:
        """The output budget when none is given (``None``: the provider's default)."""
        return None

    def _no_key(self, base_url: str | None) -> str:
        """The key to use when none is given or set; by default, there is none."""
        raise AuthenticationError(
            f"no {self._provider} API key: pass api_key= or set {self._key_variable}"
        )

    def _where(self) -> str:
        """How error messages name this model."""
        return f"{self._provider} model {self.model_name!r}"


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
