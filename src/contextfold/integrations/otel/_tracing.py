"""TracingMiddleware: OpenTelemetry spans for an agent's replies, steps, tools and compressions.

Names follow the GenAI semantic conventions where they define one (``invoke_agent``,
``chat``, ``execute_tool`` spans; ``gen_ai.*`` attributes); everything about the context
is under ``contextfold.*``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, assert_never

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from ...context import (
    BackgroundCompactionEvent,
    CompressionEvent,
    ContextEvent,
    ContextUsage,
    ImageRemovalEvent,
    TruncationEvent,
    UsageHintEvent,
)
from ...message import ToolResultBlock, is_readback
from ...middleware import (
    AgentView,
    CompressionContext,
    Middleware,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
)

if TYPE_CHECKING:
    from ...message import Msg
    from ...model import ChatResponse

__all__ = ["TracingMiddleware", "compression_attributes", "record_event", "usage_attributes"]

_SCOPE = "contextfold"
_PROVIDERS = {"OpenAIChatModel": "openai", "AnthropicChatModel": "anthropic"}


def usage_attributes(usage: ContextUsage) -> dict[str, int]:
    """The per-layer token counts of a model input, as ``contextfold.tokens.*``."""
    return {
        "contextfold.tokens.system": usage.system,
        "contextfold.tokens.summary": usage.summary,
        "contextfold.tokens.context": usage.context,
        "contextfold.tokens.tools": usage.tools,
        "contextfold.tokens.total": usage.total,
        "contextfold.context_size": usage.context_size,
    }


class TracingMiddleware(Middleware):
    """Spans for one agent: ``invoke_agent`` per reply, around ``chat`` per reasoning step,
    ``execute_tool`` per tool call and ``contextfold.compress`` per compression; events
    for truncation, image removal, the usage note and read-back results.

    ``Agent(..., middleware=[TracingMiddleware()])``; the global tracer provider unless
    ``tracer_provider`` is given. Message content is never recorded: not in attributes,
    events or statuses (a failure is recorded by its type, ``error.type``).
    """

    def __init__(self, *, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer: Tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)

    @contextmanager
    def _span(self, name: str, **options: Any) -> Iterator[Span]:
        """A span whose failure is recorded by type only (``error.type``): an exception's
        message may quote the conversation, so it is not recorded."""
        with self.tracer.start_as_current_span(
            name, record_exception=False, set_status_on_exception=False, **options
        ) as span:
            try:
                yield span
            except BaseException as exc:
                kind = type(exc).__qualname__
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
                raise

    async def on_reply(
        self, ctx: ReplyContext, call_next: Callable[[ReplyContext], Awaitable[Msg]]
    ) -> Msg:
        agent = ctx.agent
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.name,
            "gen_ai.conversation.id": agent.session_id,
            **_model_attributes(agent),
        }
        with self._span(
            f"invoke_agent {agent.name}", kind=SpanKind.INTERNAL, attributes=attributes
        ):
            return await call_next(ctx)

    async def on_model_call(
        self,
        ctx: ModelCallContext,
        call_next: Callable[[ModelCallContext], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        agent = ctx.agent
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": agent.session_id,
            **_model_attributes(agent),
            "contextfold.step": ctx.step,
            "contextfold.messages": len(ctx.messages),
            **usage_attributes(ctx.model_input.usage),
        }
        model = attributes.get("gen_ai.request.model", "")
        with self._span(
            f"chat {model}".strip(), kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            response = await call_next(ctx)
            if response.model:
                span.set_attribute("gen_ai.response.model", response.model)
            if response.stop_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [response.stop_reason])
            if response.usage is not None:
                span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": response.usage.input_tokens,
                        "gen_ai.usage.output_tokens": response.usage.output_tokens,
                        "gen_ai.usage.cache_read.input_tokens": response.usage.cache_read_tokens,
                        "gen_ai.usage.cache_creation.input_tokens": (
                            response.usage.cache_write_tokens
                        ),
                    }
                )
            return response

    async def on_tool_call(
        self,
        ctx: ToolCallContext,
        call_next: Callable[[ToolCallContext], Awaitable[ToolResultBlock]],
    ) -> ToolResultBlock:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": ctx.call.name,
            "gen_ai.tool.call.id": ctx.call.id,
            "contextfold.step": ctx.step,
        }
        with self._span(
            f"execute_tool {ctx.call.name}", kind=SpanKind.INTERNAL, attributes=attributes
        ) as span:
            result = await call_next(ctx)
            if result.is_error:
                # The tool's output is content: the status says only that it failed.
                span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
                span.set_attribute("error.type", "tool_error")
            if is_readback(result):
                span.add_event(
                    "contextfold.readback",
                    {"contextfold.tool": result.name, "contextfold.chars": len(result.text())},
                )
            return result

    async def on_compression(
        self,
        ctx: CompressionContext,
        call_next: Callable[[CompressionContext], Awaitable[CompressionEvent | None]],
    ) -> CompressionEvent | None:
        attributes: dict[str, Any] = {
            "contextfold.trigger": ctx.trigger,
            "contextfold.force": ctx.force,
            "gen_ai.conversation.id": ctx.agent.session_id,
        }
        with self._span(
            "contextfold.compress", kind=SpanKind.INTERNAL, attributes=attributes
        ) as span:
            event = await call_next(ctx)
            if event is None:
                span.set_attribute("contextfold.compressed", False)
            else:
                span.set_attributes(compression_attributes(event))
            return event

    async def on_context_event(self, event: ContextEvent, agent: AgentView) -> None:
        record_event(trace.get_current_span(), event)


def compression_attributes(event: CompressionEvent) -> dict[str, Any]:
    """What a compression did, as ``contextfold.*`` attributes."""
    attributes: dict[str, Any] = {
        "contextfold.compressed": True,
        "contextfold.method": event.method,
        "contextfold.tokens.before": event.tokens_before,
        "contextfold.tokens.after": event.tokens_after,
        "contextfold.messages.removed": event.messages_removed,
        "contextfold.messages.kept": event.messages_kept,
        "contextfold.attempts": event.attempts,
    }
    if event.offload_ref is not None:
        attributes["contextfold.offload.ref"] = event.offload_ref
    if event.error is not None:
        attributes["contextfold.error"] = event.error
    return attributes


def record_event(span: Span, event: ContextEvent) -> None:
    """``event`` as a span event on ``span`` (compressions have spans of their own)."""
    if isinstance(event, TruncationEvent):
        attributes: dict[str, Any] = {
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.tool_call_id,
            "contextfold.tokens.before": event.tokens_before,
            "contextfold.tokens.after": event.tokens_after,
        }
        if event.offload_ref is not None:
            attributes["contextfold.offload.ref"] = event.offload_ref
        span.add_event("contextfold.truncation", attributes)
    elif isinstance(event, ImageRemovalEvent):
        span.add_event(
            "contextfold.image_removal",
            {
                "contextfold.images.removed": event.images_removed,
                "contextfold.offload.refs": event.offload_refs,
                "contextfold.tokens.before": event.tokens_before,
                "contextfold.tokens.after": event.tokens_after,
            },
        )
    elif isinstance(event, UsageHintEvent):
        span.add_event(
            "contextfold.usage_hint",
            {
                "contextfold.tokens.total": event.tokens,
                "contextfold.context_size": event.context_size,
            },
        )
    elif isinstance(event, CompressionEvent):
        span.add_event("contextfold.compression", compression_attributes(event))
    elif isinstance(event, BackgroundCompactionEvent):
        attributes = {
            "contextfold.background.phase": event.phase,
            "contextfold.background.cause": event.cause,
            "contextfold.duration_s": event.duration_s,
            "contextfold.waited_s": event.waited_s,
        }
        if event.reason is not None:
            attributes["contextfold.background.reason"] = event.reason
        span.add_event("contextfold.background_compaction", attributes)
    else:
        assert_never(event)


def _model_attributes(agent: AgentView) -> dict[str, str]:
    model = agent.model
    attributes = {"gen_ai.request.model": str(getattr(model, "model_name", type(model).__name__))}
    provider = _PROVIDERS.get(type(model).__name__)
    if provider is not None:
        attributes["gen_ai.provider.name"] = provider
    return attributes
