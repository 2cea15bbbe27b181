"""OpenTelemetry spans for contextfold: ``Agent(..., middleware=[TracingMiddleware()])``.

``record_event`` puts an engine event on any span, for engines run without the agent
(``ContextEngine(on_event=...)``, the framework integrations). Needs
``pip install 'contextfold[otel]'``; without it nothing of OpenTelemetry is imported.
"""

from ..._exceptions import MissingDependencyError as _Missing

try:
    import opentelemetry.trace as _trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _Missing("opentelemetry-api", "otel") from exc

from ._tracing import TracingMiddleware, compression_attributes, record_event, usage_attributes

__all__ = ["TracingMiddleware", "compression_attributes", "record_event", "usage_attributes"]
