"""Image limit: oldest images leave with a placeholder; offloaded when possible."""

from __future__ import annotations

from contextfold.context import ContextEvent, ImageRemovalEvent
from contextfold.message import DataBlock, Msg, TextBlock, ToolResultBlock

from .ctx_support import (
    ContextOnlyOffloader,
    RecordingOffloader,
    call,
    image,
    image_msg,
    make_engine,
    results,
)


def images_in(msgs: tuple[Msg, ...] | list[Msg]) -> int:
    return sum(1 for m in msgs for b in m.iter_data() if b.kind == "image")


def placeholders(msgs: tuple[Msg, ...]) -> list[str]:
    texts: list[str] = []
    for m in msgs:
        for b in m.blocks():
            if isinstance(b, TextBlock):
                texts.append(b.text)
            elif isinstance(b, ToolResultBlock) and not isinstance(b.output, str):
                texts.extend(p.text for p in b.output if isinstance(p, TextBlock))
    return [t for t in texts if t.startswith("[An image was removed")]


async def test_images_over_the_limit_leave_oldest_first() -> None:
    engine, _ = make_engine(max_image_num=2)
    msgs = [image_msg() for _ in range(4)]
    for m in msgs:
        engine.append(m)
    await engine.prepare("sys", [])
    kept = [images_in([m]) for m in engine.context]
    assert kept == [0, 0, 1, 1]


async def test_without_offloader_the_placeholder_says_removed() -> None:
    engine, _ = make_engine(max_image_num=1)
    engine.append(image_msg())
    engine.append(image_msg())
    await engine.prepare("sys", [])
    (note,) = placeholders(engine.context)
    assert "discarded" in note
    assert "'" not in note


async def test_with_data_offloader_the_placeholder_gives_the_reference() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(max_image_num=1, offloader=offloader)
    first = image_msg()
    engine.append(first)
    engine.append(image_msg())
    await engine.prepare("sys", [])
    (note,) = placeholders(engine.context)
    assert "'/ws/data/1.png'" in note
    assert offloader.data == first.get_blocks(DataBlock)


async def test_offloader_without_offload_data_discards_images() -> None:
    engine, _ = make_engine(max_image_num=0, offloader=ContextOnlyOffloader())
    engine.append(image_msg())
    await engine.prepare("sys", [])
    (note,) = placeholders(engine.context)
    assert "discarded" in note


async def test_zero_keeps_no_image() -> None:
    engine, _ = make_engine(max_image_num=0)
    engine.append(image_msg(2))
    asst = call("screenshot")
    engine.append(asst)
    await engine.add_tool_results(results(asst, [TextBlock(text="shot"), image()]))
    model_input = await engine.prepare("sys", [])
    assert images_in(model_input.messages()) == 0
    assert len(placeholders(engine.context)) == 3


async def test_removal_never_mutates_the_stored_message() -> None:
    engine, _ = make_engine(max_image_num=0)
    original = image_msg()
    engine.append(original)
    await engine.prepare("sys", [])
    assert images_in([original]) == 1
    assert engine.context[0] is not original
    assert engine.context[0].id == original.id


async def test_token_total_follows_the_replacement() -> None:
    engine, _ = make_engine(max_image_num=0)
    engine.append(image_msg(3))
    model_input = await engine.prepare("sys", [])
    assert model_input.usage.total == engine.counter.count_request(model_input.messages(), [])


async def test_removal_emits_an_event() -> None:
    events: list[ContextEvent] = []
    engine, _ = make_engine(max_image_num=1, offloader=RecordingOffloader(), events=events)
    engine.append(image_msg(3))
    await engine.prepare("sys", [])
    (event,) = [e for e in events if isinstance(e, ImageRemovalEvent)]
    assert event.images_removed == 2
    assert event.offload_refs == ["/ws/data/1.png", "/ws/data/2.png"]
    assert event.tokens_before > event.tokens_after == engine.context_tokens


async def test_images_within_the_limit_are_untouched() -> None:
    engine, _ = make_engine(max_image_num=5)
    msg = image_msg(2)
    engine.append(msg)
    await engine.prepare("sys", [])
    assert engine.context[0] is msg
