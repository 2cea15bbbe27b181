"""No message or tool content in any span attribute, event or status, and failures carry
``error.type`` (issue 26: a failed tool's span status carried 200 characters of its output)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs contextfold[otel]")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextfold.agent import Agent
from contextfold.integrations.otel import TracingMiddleware
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit

SECRET = "SECRET-OUTPUT-7731"


async def run(exporter: InMemorySpanExporter, *, fail_model: bool = False) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    toolkit = Toolkit()

    @toolkit.register
    def deploy(service: str) -> str:
        """Deploy a service.

        Args:
            service: Its name.
        """
        raise RuntimeError(f"{SECRET}: deploy of {service} failed")

    replies: list[object] = [tool_reply(("deploy", {"service": "api"})), "It failed."]
    if fail_model:
        replies = [ValueError(f"{SECRET} in the provider's error")]
    agent = Agent(
        name="ops",
        system_prompt="You deploy.",
        model=ScriptedModel(replies),  # type: ignore[arg-type]
        toolkit=toolkit,
        middleware=[TracingMiddleware(tracer_provider=provider)],
    )
    await agent.reply(f"Deploy the api. {SECRET}")


def everything(exporter: InMemorySpanExporter) -> str:
    """Every attribute, event and status of every span, as text."""
    out = []
    for span in exporter.get_finished_spans():
        out.append(json.dumps(dict(span.attributes or {}), default=str))
        out.append(str(span.status.description))
        for event in span.events:
            out.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(out)


async def test_a_failed_tool_span_has_an_error_type_and_no_output() -> None:
    exporter = InMemorySpanExporter()
    await run(exporter)
    (tool,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool deploy"]
    assert tool.status.status_code is StatusCode.ERROR
    assert (tool.attributes or {}).get("error.type") == "tool_error"
    assert SECRET not in everything(exporter)


async def test_a_failed_model_call_records_the_error_type_not_its_message() -> None:
    exporter = InMemorySpanExporter()
    with pytest.raises(Exception, match=SECRET):
        await run(exporter, fail_model=True)
    failed = [s for s in exporter.get_finished_spans() if s.status.status_code is StatusCode.ERROR]
    assert failed
    assert all((s.attributes or {}).get("error.type") for s in failed)
    assert SECRET not in everything(exporter)
