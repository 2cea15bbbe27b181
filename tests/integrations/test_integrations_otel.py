"""OpenTelemetry: one scripted run yields the expected span tree and attributes.

The agent reads long logs (truncated and offloaded), is compressed automatically, reads a
cut part back, and answers; the SDK's in-memory exporter receives every span.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs contextfold[otel]")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextfold.agent import Agent
from contextfold.context import ContextConfig
from contextfold.integrations.otel import TracingMiddleware
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import MemoryWorkspace

from .support import log_text

SUMMARY = {
    "task_overview": "Read the logs.",
    "current_state": "Logs 0 to 4 were read.",
    "important_discoveries": "Each log is long.",
    "next_steps": "Read the cut part of log0.",
    "context_to_preserve": "none",
}
LOGS = 4
"""Logs read before the automatic compression (each result is cut to 300 tokens)."""
MARKER_REF = re.compile(r"You can refer to the file in '([^']+)'")


def script() -> Any:
    refs: list[str] = []

    def respond(request: ScriptedRequest) -> ScriptedReply:
        for msg in request.messages:
            for result in msg.tool_results:
                found = MARKER_REF.search(result.text())
                if found and found.group(1) not in refs:
                    refs.append(found.group(1))
        reads = sum(1 for m in request.messages for r in m.tool_results if r.name == "Read")
        logs = sum(1 for m in request.messages for c in m.tool_calls if c.name == "read_log")
        if reads:
            return "log0 fails with ERR-7731."
        summarized = any(m.metadata.get("contextfold") == "summary" for m in request.messages)
        if not summarized and logs < 10:
            return tool_reply(("read_log", {"name": f"log{logs}"}))
        return tool_reply(("Read", {"path": refs[0], "offset": 28, "limit": 4}))

    return respond


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def tree(spans: tuple[ReadableSpan, ...]) -> list[str]:
    """Span names, children indented under their parent, in start order."""
    by_id = {s.context.span_id: s for s in spans}

    def depth(span: ReadableSpan) -> int:
        parent = span.parent
        return (
            0 if parent is None or parent.span_id not in by_id else 1 + depth(by_id[parent.span_id])
        )

    return ["  " * depth(s) + s.name for s in sorted(spans, key=lambda s: s.start_time or 0)]


async def test_one_run_yields_the_span_tree_and_attributes(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    toolkit = Toolkit()

    async def read_log(name: str) -> str:
        """Read one log.

        Args:
            name: The log's name.
        """
        return log_text(name)

    toolkit.register(read_log)
    agent = Agent(
        name="logs",
        system_prompt="Read the logs.",
        model=ScriptedModel(script(), context_size=2000),
        summarizer=ScriptedModel(lambda request: dict(SUMMARY)),
        toolkit=toolkit,
        context_config=ContextConfig(trigger_ratio=0.8, reserve_ratio=0.2, tool_result_limit=300),
        offloader=MemoryWorkspace(),
        middleware=[TracingMiddleware(tracer_provider=provider)],
        tasks_enabled=False,
        session_id="s1",
    )
    reply = await agent.reply("Read the logs and find the error.")
    assert reply.text == "log0 fails with ERR-7731."

    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        "invoke_agent logs",
        *[line for i in range(LOGS) for line in ("  chat scripted", "  execute_tool read_log")],
        "  contextfold.compress",
        "  chat scripted",
        "  execute_tool Read",
        "  chat scripted",
    ]
    root = next(s for s in spans if s.name == "invoke_agent logs")
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "logs"
    assert root.attributes["gen_ai.conversation.id"] == "s1"
    truncations = [e for e in root.events if e.name == "contextfold.truncation"]
    assert len(truncations) == LOGS
    first = truncations[0].attributes
    assert first is not None
    assert first["gen_ai.tool.name"] == "read_log"
    assert first["contextfold.tokens.before"] > 300 >= first["contextfold.tokens.after"]
    assert str(first["contextfold.offload.ref"]).startswith("sessions/s1/tool_result-")

    compress = next(s for s in spans if s.name == "contextfold.compress")
    attributes = dict(compress.attributes or {})
    assert attributes["contextfold.trigger"] == "auto"
    assert attributes["contextfold.method"] == "summary"
    assert attributes["contextfold.tokens.before"] > attributes["contextfold.tokens.after"]
    assert str(attributes["contextfold.offload.ref"]).startswith("sessions/s1/")

    chats = [s for s in spans if s.name == "chat scripted"]
    first_chat = dict(chats[0].attributes or {})
    assert first_chat["gen_ai.operation.name"] == "chat"
    assert first_chat["gen_ai.request.model"] == "scripted"
    assert first_chat["contextfold.step"] == 0
    assert first_chat["contextfold.tokens.summary"] == 0
    after = dict(chats[LOGS].attributes or {})
    assert after["contextfold.tokens.summary"] > 0
    assert "gen_ai.usage.input_tokens" in after
    assert "gen_ai.usage.output_tokens" in after

    read = next(s for s in spans if s.name == "execute_tool Read")
    assert [e.name for e in read.events] == ["contextfold.readback"]
    assert dict(read.attributes or {})["gen_ai.tool.name"] == "Read"


def test_importing_contextfold_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, contextfold, contextfold.agent, contextfold.integrations\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
