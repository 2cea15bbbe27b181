"""Property tests over generated conversations: fit, validity, one compression, no loss."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.context import (
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ModelSummarizer,
)
from contextfold.message import (
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolResultContent,
    ToolSpec,
    check_anthropic_valid,
    check_openai_valid,
)
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest

from .ctx_support import RecordingOffloader, call, image, image_msg, results, summary, user, words

CONTEXT_SIZE = 3000
TOOLS = [ToolSpec(name="bash", description="Run a shell command.")]

result_size = st.one_of(st.integers(5, 300), st.integers(1500, 6000))
step = st.one_of(
    st.tuples(st.just("user"), st.integers(5, 1200)),
    st.tuples(st.just("assistant"), st.integers(5, 300)),
    st.tuples(st.just("tools"), st.lists(result_size, min_size=1, max_size=3)),
    st.tuples(st.just("tool_image"), st.integers(5, 200)),
    st.tuples(st.just("image"), st.integers(1, 3)),
)


@dataclass
class Ledger:
    """Everything the test ever added, to check nothing was lost."""

    ids: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    images: int = 0


def count_images(msgs: list[Msg] | tuple[Msg, ...]) -> int:
    return sum(1 for m in msgs for b in m.iter_data() if b.kind == "image")


def result_text(block: ToolResultBlock) -> str:
    """The result's own text, without image placeholders the engine added."""
    if isinstance(block.output, str):
        return block.output
    return "\n".join(
        b.text
        for b in block.output
        if isinstance(b, TextBlock) and not b.text.startswith("[An image was removed")
    )


def texts_by_call(msgs: list[Msg] | tuple[Msg, ...]) -> dict[str, str]:
    return {
        b.id: result_text(b) for m in msgs for b in m.blocks() if isinstance(b, ToolResultBlock)
    }


async def add(engine: ContextEngine, kind: str, arg: object, added: Ledger) -> None:
    msgs: list[Msg] = []
    if kind == "user":
        msgs = [user(words(int(arg)))]  # type: ignore[call-overload]
    elif kind == "assistant":
        msgs = [Msg("assistant", words(int(arg)), "assistant")]  # type: ignore[call-overload]
    elif kind == "image":
        msgs = [image_msg(int(arg))]  # type: ignore[call-overload]
    for m in msgs:
        engine.append(m)
        added.ids.append(m.id)
        added.images += count_images([m])
    if kind in ("tools", "tool_image"):
        sizes = list(arg) if isinstance(arg, list) else [arg]
        asst = call(*["bash"] * len(sizes), text="running")
        engine.append(asst)
        added.ids.append(asst.id)
        outputs: list[str | list[ToolResultContent]] = []
        for i, size in enumerate(sizes):
            text = words(int(size), f"r{i}_")  # type: ignore[call-overload]
            outputs.append([TextBlock(text=text), image()] if kind == "tool_image" else text)
            added.outputs[asst.tool_calls[i].id] = text
        res = results(asst, *outputs)
        added.images += count_images([res])
        stored = await engine.add_tool_results(res)
        added.ids.append(stored.id)


def check_nothing_lost(engine: ContextEngine, offloader: RecordingOffloader, added: Ledger) -> None:
    offloaded = [m for batch in offloader.contexts for m in batch]
    present = {m.id for m in engine.context} | {m.id for m in offloaded}
    assert set(added.ids) <= present
    in_context = texts_by_call(engine.context) | texts_by_call(offloaded)
    # A truncated result is found again through the reference its marker names (a result
    # whose text was saved before is pointed at that earlier file, not saved twice).
    saved = {f"tool_result-{r.id}.txt": result_text(r) for r in offloader.results}
    for call_id, text in added.outputs.items():
        shown = in_context.get(call_id, "")
        cited = {name for name in saved if name in shown}
        assert shown == text or any(saved[name] == text for name in cited), call_id
    images = count_images(engine.context) + count_images(offloaded) + len(offloader.data)
    assert images == added.images


async def run_conversation(
    steps: list[tuple[str, object]],
    failures: list[bool],
    *,
    use_offloader: bool,
    trigger: float,
    reserve: float,
) -> None:
    outcomes = list(failures)

    def summarize(request: ScriptedRequest) -> ScriptedReply:
        if outcomes and outcomes.pop(0):
            return RuntimeError("summarizer failed")
        return summary()

    model = ScriptedModel(summarize, context_size=CONTEXT_SIZE)
    offloader = RecordingOffloader()
    events: list[ContextEvent] = []
    engine = ContextEngine(
        config=ContextConfig(
            trigger_ratio=trigger,
            reserve_ratio=reserve,
            tool_result_limit=600,
            max_image_num=2,
        ),
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(model, attempts=2),
        session_id="p",
        offloader=offloader if use_offloader else None,
        on_event=events.append,
    )
    added = Ledger()
    for kind, arg in steps:
        await add(engine, kind, arg, added)
        before = len([e for e in events if isinstance(e, CompressionEvent)])
        model_input = await engine.prepare("You are a coding agent.", TOOLS)
        after = len([e for e in events if isinstance(e, CompressionEvent)])
        assert after - before <= 1
        sent = model_input.messages()
        assert model_input.usage.total <= CONTEXT_SIZE
        assert model_input.usage.total == engine.counter.count_request(sent, TOOLS)
        assert check_openai_valid(sent) == []
        assert check_anthropic_valid(sent) == []
        assert count_images(sent) <= 2
        if use_offloader:
            check_nothing_lost(engine, offloader, added)


async def test_a_result_cut_twice_keeps_its_original_saved() -> None:
    """Found by the property below: a result truncated on arrival and cut again at a
    compaction was saved a second time, its cut text over the original's file."""
    await run_conversation(
        [("user", 244), ("tools", [1500, 1500])],
        [],
        use_offloader=True,
        trigger=0.5,
        reserve=0.05,
    )


async def test_the_usage_hint_never_pushes_the_request_past_the_window() -> None:
    """Found by the property below: a compaction left the request just under the window
    (what must stay, the request in progress and a pending tool exchange, could not be
    cut), and the usage hint added after it took the request to 3,001 and 3,004 tokens of
    3,000."""
    await run_conversation(
        [*[("user", 5)] * 26, ("user", 762), ("tool_image", 118)],
        [],
        use_offloader=False,
        trigger=0.9,
        reserve=0.3,
    )
    await run_conversation(
        [
            *[("user", 5)] * 3,
            *[("user", 122), ("user", 174), ("user", 744)],
            *[("tool_image", 54), ("tool_image", 124)],
        ],
        [],
        use_offloader=False,
        trigger=0.9,
        reserve=0.3,
    )


async def test_a_summary_beside_what_must_stay_fits_the_window() -> None:
    """Found by the property below: the request in progress (834 words), two pending
    tool exchanges with images and a summary keeping the earlier user messages word for
    word came to 3,002 tokens of 3,000; nothing in the request may be cut but the summary
    layer, and the compaction did not cut it."""
    await run_conversation(
        [
            *[("user", 5), ("user", 5), ("user", 122), ("user", 172), ("user", 834)],
            *[("tool_image", 14), ("tool_image", 106)],
        ],
        [],
        use_offloader=False,
        trigger=0.9,
        reserve=0.3,
    )


async def test_a_summary_beside_a_long_request_in_progress_fits_the_window() -> None:
    """Found by the property below (2026-12-07): the request in progress (892 words) and
    a pending tool exchange with an image beside a 347-token summary came to 3,001
    tokens of 3,000."""
    await run_conversation(
        [
            *[("user", 380), ("user", 576), ("user", 600), ("user", 5), ("user", 188)],
            *[("user", 892), ("tool_image", 120)],
        ],
        [],
        use_offloader=False,
        trigger=0.9,
        reserve=0.3,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=1, max_size=30),
    failures=st.lists(st.booleans(), max_size=12),
    use_offloader=st.booleans(),
    trigger=st.sampled_from([0.5, 0.7, 0.8, 0.9]),
    reserve=st.sampled_from([0.05, 0.1, 0.2, 0.3]),
)
def test_generated_conversations_keep_every_invariant(
    steps: list[tuple[str, object]],
    failures: list[bool],
    use_offloader: bool,
    trigger: float,
    reserve: float,
) -> None:
    if reserve >= trigger:
        reserve = trigger / 2
    asyncio.run(
        run_conversation(
            steps, failures, use_offloader=use_offloader, trigger=trigger, reserve=reserve
        )
    )
