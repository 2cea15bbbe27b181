"""Middleware: hooks on the system prompt and wrappers around every stage of the loop.

Wrappers form an onion: the first middleware in the list is the outermost layer. Each
wrapper is ``async def hook(ctx, call_next)``; it may read or change ``ctx``, call
``call_next(ctx)`` zero or one time, and read or replace what comes back.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ..context import CompressionEvent, CompressionTrigger, ContextConfig, ContextEvent, ModelInput
from ..message import HintBlock, Msg, ToolCallBlock, ToolChoice, ToolResultBlock, ToolSpec
from ..model import ChatResponse
from ._view import AgentView

__all__ = [
    "CallNext",
    "CompressionContext",
    "Middleware",
    "MiddlewareStack",
    "ModelCallContext",
    "ReplyContext",
    "ToolCallContext",
    "WrapperHook",
    "compression_middleware",
    "model_call_middleware",
    "reply_middleware",
    "system_prompt_middleware",
    "tool_call_middleware",
]

_C = TypeVar("_C")
_R = TypeVar("_R")

CallNext = Callable[[_C], Awaitable[_R]]
"""The next layer of the onion: ``await call_next(ctx)``."""


@dataclass
class ReplyContext:
    """One ``agent.reply`` call. ``msg`` is what the user sent (may be changed)."""

    agent: AgentView
    msg: Msg | list[Msg] | None


@dataclass
class ModelCallContext:
    """One model call. ``messages``/``tools`` are exactly what will be sent.

    They start as ``model_input.messages()`` and ``model_input.tools``; a middleware that
    changes them changes the request (``model_input.usage`` then no longer matches).
    """

    agent: AgentView
    step: int
    model_input: ModelInput
    messages: list[Msg]
    tools: list[ToolSpec]
    tool_choice: ToolChoice | None = None


@dataclass
class ToolCallContext:
    """One tool call, before permissions are checked and the tool runs."""

    agent: AgentView
    step: int
    call: ToolCallBlock


@dataclass
class CompressionContext:
    """One compression: automatic (before a step), manual (``compress_context``), by the
    ``CompressContext`` tool, or after the provider reported the window exceeded.

    ``trigger`` tells which. A middleware may change ``config``, ``instructions``,
    ``force`` or ``threshold_ratio``, or skip the compression by not calling ``call_next``.
    """

    agent: AgentView
    trigger: CompressionTrigger
    config: ContextConfig
    instructions: HintBlock | None = None
    force: bool = False
    threshold_ratio: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Middleware:
    """Override any hook; the defaults pass everything through unchanged."""

    async def on_system_prompt(self, prompt: str, agent: AgentView) -> str:
        """Transform the system prompt (hooks run in list order)."""
        return prompt

    async def on_reply(
        self, ctx: ReplyContext, call_next: Callable[[ReplyContext], Awaitable[Msg]]
    ) -> Msg:
        """Wrap a whole ``reply``."""
        return await call_next(ctx)

    async def on_model_call(
        self,
        ctx: ModelCallContext,
        call_next: Callable[[ModelCallContext], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        """Wrap one model call."""
        return await call_next(ctx)

    async def on_tool_call(
        self,
        ctx: ToolCallContext,
        call_next: Callable[[ToolCallContext], Awaitable[ToolResultBlock]],
    ) -> ToolResultBlock:
        """Wrap one tool call (permission check and execution are inside)."""
        return await call_next(ctx)

    async def on_compression(
        self,
        ctx: CompressionContext,
        call_next: Callable[[CompressionContext], Awaitable[CompressionEvent | None]],
    ) -> CompressionEvent | None:
        """Wrap a compression (every trigger, automatic ones included)."""
        return await call_next(ctx)

    async def on_context_event(self, event: ContextEvent, agent: AgentView) -> None:
        """Observe every change the context engine makes."""


WrapperHook = Literal["on_reply", "on_model_call", "on_tool_call", "on_compression"]
"""The hooks that wrap a stage of the loop."""


class MiddlewareStack:
    """A list of middleware, outermost first, run the way the agent runs them.

    Hooks a middleware does not override cost nothing: each stage's onion holds only the
    layers that implement it.
    """

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = list(middleware)
        self._layers: dict[str, list[Any]] = {}

    def __iter__(self) -> Iterator[Middleware]:
        return iter(self.middleware)

    def __len__(self) -> int:
        return len(self.middleware)

    async def wrap(self, hook: WrapperHook, ctx: _C, core: Callable[[_C], Awaitable[_R]]) -> _R:
        """Run ``core(ctx)`` inside every middleware's ``hook``, the first outermost."""
        layers = self._layers.get(hook)
        if layers is None:
            layers = [getattr(mw, hook) for mw in self.middleware if _overrides(mw, hook)]
            self._layers[hook] = layers
        if not layers:
            return await core(ctx)  # no onion to build: the common case, several times a step
        return await _run_onion(layers, ctx, core)

    async def system_prompt(self, prompt: str, agent: AgentView) -> str:
        """``prompt`` through every ``on_system_prompt``, in list order."""
        for mw in self.middleware:
            if _overrides(mw, "on_system_prompt"):
                prompt = await _maybe_await(mw.on_system_prompt(prompt, agent))
        return prompt

    async def context_event(self, event: ContextEvent, agent: AgentView) -> None:
        """Tell every middleware about ``event``, in list order."""
        for mw in self.middleware:
            if _overrides(mw, "on_context_event"):
                await _maybe_await(mw.on_context_event(event, agent))


def _overrides(middleware: object, hook: str) -> bool:
    """Whether ``middleware`` implements ``hook`` (other than the pass-through default)."""
    method = getattr(type(middleware), hook, None)
    if method is None:
        return callable(getattr(middleware, hook, None))
    return method is not getattr(Middleware, hook, None)


async def _run_onion(
    layers: Sequence[Callable[[_C, CallNext[_C, _R]], Awaitable[_R]]],
    ctx: _C,
    core: Callable[[_C], Awaitable[_R]],
) -> _R:
    """Call ``layers[0]`` around ``layers[1]`` ... around ``core``."""

    async def call(index: int, current: _C) -> _R:
        if index == len(layers):
            return await core(current)
        return await layers[index](current, lambda nxt: call(index + 1, nxt))

    return await call(0, ctx)


async def _maybe_await(value: Any) -> Any:
    """``await value`` if it is awaitable, else ``value``."""
    return await value if inspect.isawaitable(value) else value


class _SystemPromptFunction(Middleware):
    def __init__(self, func: Callable[[str, AgentView], str | Awaitable[str]]) -> None:
        self._func = func

    async def on_system_prompt(self, prompt: str, agent: AgentView) -> str:
        result: str = await _maybe_await(self._func(prompt, agent))
        return result


def _wrapper_class(hook: str) -> type[Middleware]:
    async def method(self: Any, ctx: Any, call_next: Any) -> Any:
        return await self._func(ctx, call_next)

    return type(f"_{hook}", (Middleware,), {hook: method, "__init__": _init})


def _init(self: Any, func: Callable[..., Any]) -> None:
    self._func = func


_REPLY = _wrapper_class("on_reply")
_MODEL = _wrapper_class("on_model_call")
_TOOL = _wrapper_class("on_tool_call")
_COMPRESSION = _wrapper_class("on_compression")


def system_prompt_middleware(func: Callable[[str, AgentView], str | Awaitable[str]]) -> Middleware:
    """A middleware from ``func(prompt, agent) -> prompt`` (sync or async)."""
    return _SystemPromptFunction(func)


def reply_middleware(
    func: Callable[[ReplyContext, Callable[[ReplyContext], Awaitable[Msg]]], Awaitable[Msg]],
) -> Middleware:
    """A middleware from ``async def func(ctx, call_next)`` around each reply."""
    return _REPLY(func)  # type: ignore[call-arg]


def model_call_middleware(
    func: Callable[
        [ModelCallContext, Callable[[ModelCallContext], Awaitable[ChatResponse]]],
        Awaitable[ChatResponse],
    ],
) -> Middleware:
    """A middleware from ``async def func(ctx, call_next)`` around each model call."""
    return _MODEL(func)  # type: ignore[call-arg]


def tool_call_middleware(
    func: Callable[
        [ToolCallContext, Callable[[ToolCallContext], Awaitable[ToolResultBlock]]],
        Awaitable[ToolResultBlock],
    ],
) -> Middleware:
    """A middleware from ``async def func(ctx, call_next)`` around each tool call."""
    return _TOOL(func)  # type: ignore[call-arg]


def compression_middleware(
    func: Callable[
        [CompressionContext, Callable[[CompressionContext], Awaitable[CompressionEvent | None]]],
        Awaitable[CompressionEvent | None],
    ],
) -> Middleware:
    """A middleware from ``async def func(ctx, call_next)`` around each compression."""
    return _COMPRESSION(func)  # type: ignore[call-arg]
