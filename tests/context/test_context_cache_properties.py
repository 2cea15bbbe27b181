"""The cache-preserving options, over generated conversations: every request fits the
window and is provider-valid, a request extends the one before it unless a compaction
came between (at most one cache break per compaction event), and a summary request
extends the last request sent."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.context import CompressionEvent, ContextConfig, ContextEngine, ModelSummarizer
from contextfold.message import (
    Marker,
    Msg,
    ToolSpec,
    check_anthropic_valid,
    check_openai_valid,
    marker_of,
)
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest

from .ctx_support import RecordingOffloader, call, results, summary, user, words

CONTEXT_SIZE = 4000
TOOLS = [ToolSpec(name="bash", description="Run a shell command."), ToolSpec(name="Read")]

step = st.one_of(
    st.tuples(st.just("user"), st.integers(5, 400)),
    st.tuples(st.just("bash"), st.integers(5, 900)),
    st.tuples(st.just("Read"), st.integers(5, 900)),
)
options = st.fixed_dictionaries(
    {
        "observation_masking": st.booleans(),
        "summary_request": st.sampled_from(["prefix", "transcript"]),
        "tool_policies": st.sampled_from([{}, {"Read": "protect"}, {"bash": "strip"}]),
        "min_compaction_saving": st.sampled_from([0.0, 0.05]),
    }
)


def stored(msgs: list[Msg]) -> list[Msg]:
    """A request's messages without the trailing usage note (never stored)."""
    return [m for m in msgs if marker_of(m) is not Marker.USAGE_HINT]


def extends(new: list[Msg], old: list[Msg]) -> bool:
    return len(new) >= len(old) and all(a is b for a, b in zip(new, old, strict=False))


async def run(steps: list[tuple[str, int]], config: dict[str, object]) -> None:
    def summarize(request: ScriptedRequest) -> ScriptedReply:
        return summary()

    model = ScriptedModel(summarize, context_size=CONTEXT_SIZE)
    events: list[object] = []
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=CONTEXT_SIZE,
        summarizer=ModelSummarizer(model),
        config=ContextConfig(tool_result_limit=1200, **config),  # type: ignore[arg-type]
        offloader=RecordingOffloader(),
        on_event=events.append,
    )
    previous: list[Msg] = []
    for kind, size in steps:
        if kind == "user":
            engine.append(user(words(size)))
        else:
            asst = call(kind, text="working")
            engine.append(asst)
            await engine.add_tool_results(results(asst, words(size, "out")))
        seen_requests = len(model.requests)
        before = sum(isinstance(e, CompressionEvent) for e in events)
        model_input = await engine.prepare("You are a coding agent.", TOOLS)
        compacted = sum(isinstance(e, CompressionEvent) for e in events) - before
        sent = model_input.messages()
        assert model_input.usage.total <= CONTEXT_SIZE
        assert check_openai_valid(sent) == []
        assert check_anthropic_valid(sent) == []
        if previous and not compacted:
            # No compaction: the request only appends to the one before (no cache break).
            assert extends(stored(sent), previous)
        for request in model.requests[seen_requests:]:
            assert request.is_summary
            if config["summary_request"] == "prefix" and request.tool_choice is None:
                # A prefix-form summary request extends the last request sent.
                assert extends(request.messages[:-1], previous)
        previous = stored(sent)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(step, min_size=1, max_size=40), config=options)
def test_cache_preserving_options_keep_every_invariant(
    steps: list[tuple[str, int]], config: dict[str, object]
) -> None:
    asyncio.run(run(steps, config))
