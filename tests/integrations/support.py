"""What the three framework tests share: the tool, the engine's parts, the forced plan."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from contextfold.context import (
    CompressionEvent,
    ContextConfig,
    ContextEvent,
    ModelSummarizer,
    TruncationEvent,
)
from contextfold.message import Msg
from contextfold.testing import check_requests_valid
from contextfold.workspace import MemoryWorkspace
from tests.llama_server_process import LLAMA_CONTEXT

from .recording import RequestLog

DETAIL = "ERR-7731 in src/pkg/mod.py:42"
CONTEXT_SIZE = 2400
CONFIG = ContextConfig(trigger_ratio=0.8, reserve_ratio=0.2, tool_result_limit=250)
SYSTEM = "You investigate logs with the tools. Answer briefly."
NOTES = "\n".join(
    f"- service {i} was deployed on day {i % 7} and its logs are named log{i % 4}"
    for i in range(56)
)
TASK = f"Read log0 and find its error code, then read logs 1 to 5.\n\nNotes:\n{NOTES}"
"""The task with notes long enough that the first compression has something to fold
(the tools' schemas are ~600 of the 2,400 tokens, a summary up to 720)."""
ANSWER_TOKENS = 8
"""The agent model's ``max_tokens``: the plan forces each call and writes its arguments,
so the model need only start the call (SmolLM2 otherwise fills 64 tokens with a made-up
log name, each a decode step of ~0.1 s under the tool grammar, that the plan throws away;
cut at 8, the call still comes back, as an invalid one, in all three frameworks: 88-97 s
a test pinned to one CPU, against ~100 s at 24). Summaries are the summarizer's own model,
with room for the five fields."""
MARKER_REF = re.compile(r"You can refer to the file in '([^']+)'")


def log_text(name: str) -> str:
    """A long log (about 1,000 tokens): the detail sits in the middle, which truncation cuts."""
    lines = [
        f"{name} line {i}: request served, status ok, latency {i * 7 % 90} ms" for i in range(60)
    ]
    lines.insert(30, f"{name} line 30: failure {DETAIL}")
    return "\n".join(lines)


async def read_log(name: str) -> str:
    """Read one log file.

    Args:
        name: The log's name, e.g. log0.
    """
    return log_text(name)


def summarizer(llama_server: str) -> ModelSummarizer:
    """The embedded model, through llama.cpp's OpenAI-compatible endpoint, writes summaries."""
    from contextfold.model import OpenAIChatModel
    from contextfold.token import LlamaTokenCounter

    model = OpenAIChatModel(
        "smollm2",
        base_url=llama_server,
        context_size=LLAMA_CONTEXT,
        max_tokens=256,
        temperature=0.0,
        seed=7,
        token_counter=LlamaTokenCounter(framing="server"),
    )
    return ModelSummarizer(model)


def counter() -> Any:
    """Exactly what llama.cpp's server counts."""
    from contextfold.token import LlamaTokenCounter

    return LlamaTokenCounter(framing="server")


@dataclass
class Plan:
    """Which tool each model call must use (``none`` at the end), and what happened.

    ``Read`` comes right after the first log, so its result is in a request before the
    compressions (at least one) that the later logs cause."""

    tools: list[str] = field(
        default_factory=lambda: ["read_log", "Read", *["read_log"] * 5, "none"]
    )
    calls: int = 0
    events: list[ContextEvent] = field(default_factory=list)
    workspace: MemoryWorkspace = field(default_factory=MemoryWorkspace)

    def next_choice(self) -> str:
        choice = self.tools[min(self.calls, len(self.tools) - 1)]
        self.calls += 1
        return choice

    def record(self, event: ContextEvent) -> None:
        self.events.append(event)

    @property
    def compressions(self) -> list[CompressionEvent]:
        return [e for e in self.events if isinstance(e, CompressionEvent)]

    @property
    def truncations(self) -> list[TruncationEvent]:
        return [e for e in self.events if isinstance(e, TruncationEvent)]

    def arguments(self, tool: str, index: int) -> dict[str, Any] | None:
        """The arguments the plan puts in a forced call (the 135M model's are replaced:
        log names in order, and for ``Read`` the first truncated result's reference)."""
        if tool == "read_log":
            return {"name": f"log{index}"}
        if tool == "Read":
            refs = [e.offload_ref for e in self.truncations if e.offload_ref]
            return {"path": refs[0], "offset": 25, "limit": 10} if refs else None
        return None


def readback_results(requests: list[list[Msg]]) -> list[str]:
    """Texts of the ``Read`` results the model was sent, in any request."""
    return [
        result.text()
        for messages in requests
        for msg in messages
        for result in msg.tool_results
        if result.name == "Read"
    ]


def check_plan_ran(plan: Plan, log: RequestLog) -> None:
    """Inside the framework's loop: one request per planned call, every log truncated, at
    least one compression, the cut detail read back and sent, every request valid."""
    assert len(log.bodies) == len(plan.tools)
    assert len(plan.truncations) == plan.tools.count("read_log")
    assert plan.compressions, "no compression inside the loop"
    requests = log.requests()
    assert any(DETAIL in text for text in readback_results(requests))
    check_requests_valid(requests)
