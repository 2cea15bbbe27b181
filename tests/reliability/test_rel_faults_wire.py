"""Wire-level model faults through the real OpenAI and Anthropic SDK adapters.

The adapters talk to :class:`tests.model.model_fakes.FakeServer` over
``httpx2.MockTransport``; a fault is injected into the reasoning call (whole-body or
streamed) or into the summary call of an automatic compression. Each must end in a retry,
an error result the model reads, a fallback to truncation, or a contextfold exception to
the caller; afterwards the state is provider-valid, nothing in the history is lost, and
the next reply works."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from contextfold._exceptions import (
    AuthenticationError,
    ContextfoldError,
    EmptyResponseError,
    ModelConnectionError,
)
from contextfold.agent import Agent
from contextfold.context import CompressionEvent, ContextConfig
from contextfold.tool import Toolkit
from contextfold.workspace import MemoryWorkspace
from tests.model.model_fakes import FakeServer

from .rel_support import (
    Added,
    assert_nothing_lost,
    assert_provider_valid,
    filler,
    make_agent,
    offloaded,
    record,
)

# (context size, primes before a reply that compresses, primes that leave room to overflow)
SIZES = {"openai": (4000, 3, 2), "anthropic": (5600, 2, 1)}


@dataclass(frozen=True)
class Expect:
    raises: type[BaseException] | None = None
    method: str | None = None  # compression the faulty reply did
    error_result: bool = False  # the model got a tool error result to read


RETRIED = Expect()
# Reasoning faults, by (fault, streamed?): what must happen.
REASON: dict[str, Expect] = {
    "timeout": RETRIED,
    "connect": RETRIED,
    "429": RETRIED,
    "500": RETRIED,
    "503": RETRIED,
    "context_length": Expect(method="summary"),  # compress, then retry once
    "401": Expect(raises=AuthenticationError),
    "garbled_body": RETRIED,  # a 200 whose body is not JSON: a connection failure
    "empty": Expect(raises=EmptyResponseError),
    "malformed_args": Expect(error_result=True),
    "unknown_tool": Expect(error_result=True),
}
# A stream cut after the caller saw part of the answer is not retried.
STREAM_CUT = Expect(raises=ModelConnectionError)
SUMMARY = ["timeout", "429", "500", "context_length", "garbled_body", "empty", "cut",
           "invalid_summary", "malformed_args", "text", "401"]  # fmt: skip


def _toolkit() -> Toolkit:
    kit = Toolkit()

    @kit.register
    def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: First.
            b: Second.
        """
        return a + b

    return kit


async def _run(agent: Agent, text: str, stream: bool) -> None:
    if stream:
        async for _ in agent.stream(text):
            pass
    else:
        await agent.reply(text)


async def _scenario(
    provider: str, stream: bool, kind: str, faults: list[str], expect: Expect, prime: int
) -> None:
    size = SIZES[provider][0]
    fake = FakeServer(provider)  # type: ignore[arg-type]
    ws = MemoryWorkspace()
    await ws.initialize()
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1)
    agent = make_agent(
        fake.model(context_size=size), offloader=ws, config=config, toolkit=_toolkit()
    )
    added = Added(agent.engine)
    events: list[CompressionEvent] = []

    def on_event(event: Any) -> None:
        if isinstance(event, CompressionEvent):
            events.append(event)

    agent.engine.on_event = on_event
    for i in range(prime):
        await _run(agent, filler(i, 80), stream)
    assert not events, "priming must not compress"

    fake.fail(kind, *faults)  # type: ignore[arg-type]
    outcome: BaseException | None = None
    try:
        await _run(agent, filler(99, 80), stream)
    except Exception as exc:
        outcome = exc
    if expect.raises is None:
        assert outcome is None, f"unexpected {outcome!r}"
    else:
        assert isinstance(outcome, expect.raises), f"expected {expect.raises}, got {outcome!r}"
        assert isinstance(outcome, ContextfoldError)
    assert not fake.pending[kind], "the fault was never requested"  # type: ignore[index]
    if expect.method is not None:
        assert [e.method for e in events] == [expect.method]
    if expect.error_result:
        results = [r for m in agent.context for r in m.tool_results]
        assert results
        assert results[-1].is_error
        assert results[-1].name in results[-1].text() or "argument" in results[-1].text()
    await _intact(agent, ws, added)
    await _run(agent, "go on", stream)  # the session still works
    await _intact(agent, ws, added)


async def _intact(agent: Agent, ws: MemoryWorkspace, added: Added) -> None:
    assert_provider_valid(agent)
    stored = await offloaded(ws, agent.session_id)
    assert_nothing_lost(added.ids, [m.id for m in stored], [m.id for m in agent.context])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fault", [*REASON, "cut"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_wire_fault_in_reasoning_call(provider: str, fault: str, stream: bool) -> None:
    if fault == "malformed_args" and provider == "anthropic" and not stream:
        expect = Expect(raises=EmptyResponseError)  # a JSON body cannot carry bad input
    elif fault == "cut":
        expect = STREAM_CUT if stream else RETRIED
    else:
        expect = REASON[fault]
    _, compress_at, overflow_at = SIZES[provider]
    prime = overflow_at if fault == "context_length" else compress_at - 1
    await _scenario(provider, stream, "reason", [fault], expect, prime)
    record(
        "model faults (SDK wire)",
        f"reasoning {fault} [{provider}, {'stream' if stream else 'whole'}]",
    )


@pytest.mark.parametrize("fault", SUMMARY)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_wire_fault_in_summary_call_is_retried(provider: str, fault: str) -> None:
    await _scenario(
        provider, False, "summary", [fault], Expect(method="summary"), SIZES[provider][1]
    )
    record("model faults (SDK wire)", f"summary {fault} [{provider}]")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_wire_summary_failing_every_attempt_falls_back_to_truncation(provider: str) -> None:
    faults = ["invalid_summary", "500", "500", "500", "text"]  # 3 attempts, 500 retried twice
    await _scenario(
        provider, False, "summary", faults, Expect(method="truncation"), SIZES[provider][1]
    )
    record("model faults (SDK wire)", f"summary fails every attempt [{provider}]")
