"""OpenTelemetry spans for the framework integrations, when OpenTelemetry is installed.

An agent gets its spans from ``TracingMiddleware``; a framework's loop is not ours, so
the folder opens its own: ``contextfold.fold`` around each call (the request's tokens per
layer, truncations and the usage note as events) and ``contextfold.compress`` around each
compaction, as children of whatever span the framework or the user has open. Without
OpenTelemetry they cost nothing. No message or tool content is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from ..context import (
    CompressionEvent,
    CompressionHook,
    CompressionRequest,
    ContextEvent,
    ModelInput,
)

__all__ = ["FoldSpans"]


def _trace_api() -> Any:
    """OpenTelemetry's trace API, or ``None`` when it cannot be imported (looked up per
    folder, so a process that installs it later, or blocks it, is seen as it is)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


class FoldSpans:
    """Spans of one conversation's folder (no-ops without OpenTelemetry)."""

    def __init__(self, session_id: str, tracer_provider: Any = None) -> None:
        self.session_id = session_id
        self._tracer: Any = None
        trace = _trace_api()
        if trace is not None:
            self._tracer = trace.get_tracer("contextfold", tracer_provider=tracer_provider)

    @contextmanager
    def fold(self) -> Iterator[Any]:
        """Around one call of the folder; yields the span (``None`` without tracing)."""
        if self._tracer is None:
            with nullcontext() as nothing:
                yield nothing
            return
        attributes = {
            "gen_ai.operation.name": "contextfold.fold",
            "gen_ai.conversation.id": self.session_id,
        }
        with _failures(self._tracer, "contextfold.fold", attributes) as span:
            yield span

    def finish(self, span: Any, model_input: ModelInput, events: Sequence[ContextEvent]) -> None:
        """What the call sent and what happened, on its span."""
        if span is None:
            return
        from .otel import record_event, usage_attributes

        span.set_attributes(usage_attributes(model_input.usage))
        for event in events:
            if not isinstance(event, CompressionEvent):  # those have spans of their own
                record_event(span, event)

    def around(self, inner: CompressionHook | None) -> CompressionHook | None:
        """A compression hook that opens ``contextfold.compress`` around ``inner``."""
        tracer = self._tracer
        if tracer is None:
            return inner

        async def traced(request: CompressionRequest, call_next: Any) -> CompressionEvent | None:
            from .otel import compression_attributes

            attributes = {
                "contextfold.trigger": request.trigger,
                "contextfold.force": request.force,
                "gen_ai.conversation.id": self.session_id,
            }
            with _failures(tracer, "contextfold.compress", attributes) as span:
                event = await (inner(request, call_next) if inner else call_next(request))
                if event is None:
                    span.set_attribute("contextfold.compressed", False)
                else:
                    span.set_attributes(compression_attributes(event))
                return event

        return traced


@contextmanager
def _failures(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    """A span whose failure is recorded by type (``error.type``), never by message."""
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise
