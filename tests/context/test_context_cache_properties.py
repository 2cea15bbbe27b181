"""The cache-preserving options, over generated conversations: every request fits the
window and is provider-valid, a request extends the one before it unless a compaction
came between (at most one cache break per compaction event), a summary request extends
the last request sent, and an appended summary starts with the summary it extends."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.context import (
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    LayerConfig,
    MaskingConfig,
    ModelSummarizer,
    SummaryLayer,
)
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
_CUT_TO_FIT = "cut here to fit the summarizer"
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
        "summary_update": st.sampled_from(["rewrite", "append"]),
    }
)


def stored(msgs: list[Msg]) -> list[Msg]:
    """A request's messages without the trailing usage note (never stored)."""
    return [m for m in msgs if marker_of(m) is not Marker.USAGE_HINT]


def extends(new: list[Msg], old: list[Msg]) -> bool:
    return len(new) >= len(old) and all(a is b for a, b in zip(new, old, strict=False))


async def run(
    steps: list[tuple[str, int]], config: dict[str, object], appended: list[int] | None = None
) -> None:
    """Replay ``steps``, checking every invariant; ``appended`` gets the part count of
    each appended summary."""
    appended = [] if appended is None else appended

    def summarize(request: ScriptedRequest) -> ScriptedReply:
        return summary()

    model = ScriptedModel(summarize, context_size=CONTEXT_SIZE)
    events: list[object] = []
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=CONTEXT_SIZE,
        summarizer=ModelSummarizer(model, request=config["summary_request"]),  # type: ignore[arg-type]
        config=ContextConfig(
            tool_result_limit=1200,
            min_compaction_saving=config["min_compaction_saving"],  # type: ignore[arg-type]
            layer=LayerConfig(update=config["summary_update"]),  # type: ignore[arg-type]
            masking=(
                MaskingConfig(tool_policies=config["tool_policies"])  # type: ignore[arg-type]
                if config["observation_masking"]
                else None
            ),
        ),
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
        layer = engine.summary
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
        parts = engine.summary_layer.parts if engine.summary_layer is not None else ()
        if engine.summary is not layer and layer is not None and len(parts) > 1:
            # An appended part: the layer before it is still there, block for block, so
            # the provider's cache reads it back.
            assert config["summary_update"] == "append"
            assert parts[:-1] == SummaryLayer.from_msg(layer).parts
            appended.append(len(parts))
        for request in model.requests[seen_requests:]:
            assert request.is_summary
            cut = any(_CUT_TO_FIT in m.model_dump_json() for m in request.messages)
            if config["summary_request"] == "prefix" and request.tool_choice is None and not cut:
                # A prefix-form summary request extends the last request sent, unless its
                # newest messages had to be cut to fit the summarizer's window (found by
                # hypothesis: a long newest turn leaves less than a tenth for the answer).
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


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(step, min_size=30, max_size=60),
    masking=st.booleans(),
    request=st.sampled_from(["prefix", "transcript"]),
)
def test_appended_summaries_keep_every_invariant(
    steps: list[tuple[str, int]], masking: bool, request: str
) -> None:
    config: dict[str, object] = {
        "observation_masking": masking,
        "summary_request": request,
        "tool_policies": {},
        "min_compaction_saving": 0.0,
        "summary_update": "append",
    }
    asyncio.run(run(steps, config, APPENDED))


APPENDED: list[int] = []
"""Part counts of the appended summaries the test above saw (checked below)."""


def test_the_appended_summaries_were_exercised() -> None:
    # Runs after the property test in this module: it must have appended, repeatedly.
    assert APPENDED, "no generated conversation appended a summary part"
    assert max(APPENDED) >= 3
