"""``summary_update="append"``: a compaction keeps the summary in place, word for word, and
adds a part for what it folded, so the provider's cache still holds the old part."""

from __future__ import annotations

from contextfold.context import (
    DEFAULT_SUMMARY_UPDATE_PROMPT,
    ContextConfig,
    ContextEngine,
    ExtractiveSummarizer,
    LayerConfig,
    SummaryLayer,
    SummaryRequest,
    SummarySchema,
)
from contextfold.context._layer import summary_budget
from contextfold.context._ledger import ArtifactLedger
from contextfold.context._summary import part_fields
from contextfold.message import Msg, anthropic_request
from contextfold.replay._cache import AnthropicCache, anthropic_blocks

from .ctx_support import RecordingOffloader, call, make_engine, results, summary, user, words

SYSTEM = "You are a coding agent."
PART = summary(
    task_overview="",
    current_state="Patched tokenize() in src/parser.py.",
    important_discoveries="The tests pass now.",
    next_steps="Run the whole suite.",
    context_to_preserve="",
)


async def span(engine: ContextEngine, path: str, turns: int = 6) -> None:
    """``turns`` tool exchanges whose commands and outputs name ``path``."""
    for i in range(turns):
        asst = call("bash", text=f"look at {path}")
        asst.tool_calls[0].input["command"] = f"cat {path}"
        engine.append(asst)
        await engine.add_tool_results(results(asst, f"{path}: line {i}\n" + words(250, "out")))


async def two_compactions(
    update: str, first: dict[str, str] | None = None
) -> tuple[ContextEngine, Msg, list[object]]:
    engine, model = make_engine(
        [first or summary(), PART],
        context_size=4000,
        offloader=RecordingOffloader(),
        summary_update=update,
    )
    engine.append(user("Fix the failing parser in src/parser.py."))
    await span(engine, "src/parser.py")
    assert await engine.compress(SYSTEM, force=True) is not None
    before = engine.summary
    assert before is not None
    await span(engine, "src/lexer.py")
    assert await engine.compress(SYSTEM, force=True) is not None
    return engine, before, list(model.requests)


async def test_append_keeps_the_summary_in_place_and_adds_one_part() -> None:
    engine, before, _ = await two_compactions("append")
    after = engine.summary
    assert after is not None
    *earlier, newest = SummaryLayer.from_msg(after).parts
    assert tuple(earlier) == SummaryLayer.from_msg(before).parts
    assert newest.startswith("<system-reminder>Update to the summary above")
    assert "Patched tokenize()" in newest
    assert "# Task changes" not in newest  # the task did not change


async def test_rewrite_folds_the_summary_into_one() -> None:
    engine, before, _ = await two_compactions("rewrite")
    after = engine.summary
    assert after is not None
    assert len(SummaryLayer.from_msg(after).parts) == 1
    assert not after.text.startswith(before.text)


async def test_the_summarizer_is_told_the_summary_stays() -> None:
    _, _, requests = await two_compactions("append")
    first, second = (r for r in requests if r.is_summary)
    assert DEFAULT_SUMMARY_UPDATE_PROMPT not in "\n".join(m.text for m in first.messages)
    assert DEFAULT_SUMMARY_UPDATE_PROMPT in "\n".join(m.text for m in second.messages)


async def test_the_new_part_lists_only_facts_the_layer_does_not_hold() -> None:
    engine, before, _ = await two_compactions("append")
    assert engine.summary is not None
    newest = SummaryLayer.from_msg(engine.summary).parts[-1]
    facts = newest.split("Facts from the compressed history")[1]
    assert "cat src/lexer.py" in facts
    assert "cat src/parser.py" in before.text
    assert "cat src/parser.py" not in facts
    # The layer's ledger holds both, for the rewrite that comes when the layer is full.
    listed = {e.text for e in SummaryLayer.from_msg(engine.summary).ledger.entries}
    assert {"cat src/lexer.py", "cat src/parser.py"} <= {t.split("] ", 1)[-1] for t in listed}


async def test_a_full_layer_is_rewritten() -> None:
    # A first summary that leaves less than a third of the layer's budget beside it.
    budget = summary_budget(ContextConfig(), 4000)
    long = summary(important_discoveries=words(budget * 4 // 5, "fact"))
    engine, _, _ = await two_compactions("append", first=long)
    assert engine.summary is not None
    assert len(SummaryLayer.from_msg(engine.summary).parts) == 1
    assert "Update to the summary above" not in engine.summary.text


async def _reads_after_second_compaction(update: str) -> tuple[int, int]:
    """(tokens read from the cache by the first request after the second compaction,
    tokens of the request's prefix through the first summary)."""
    engine, model = make_engine(
        [summary(), PART], context_size=4000, offloader=RecordingOffloader(), summary_update=update
    )
    cache = AnthropicCache(min_cacheable_tokens=1)
    counter = model.token_counter
    engine.append(user("Fix the failing parser in src/parser.py."))
    await span(engine, "src/parser.py")
    await engine.compress(SYSTEM, force=True)
    sent = await engine.prepare(SYSTEM)
    old = anthropic_blocks(anthropic_request(sent.messages(), cache=True), counter)
    cache.request(old, at=0)
    await span(engine, "src/lexer.py")
    await engine.compress(SYSTEM, force=True)
    sent = await engine.prepare(SYSTEM)
    new = anthropic_blocks(anthropic_request(sent.messages(), cache=True), counter)
    through_summary = sum(b.tokens for b in old[:2])  # system prompt, first summary
    return cache.request(new, at=1).read, through_summary


async def test_append_reads_the_old_summary_from_the_cache() -> None:
    read, through_summary = await _reads_after_second_compaction("append")
    assert read >= through_summary
    rewritten, _ = await _reads_after_second_compaction("rewrite")
    assert rewritten < through_summary  # only the system prompt survives a rewrite


def test_a_note_goes_on_the_newest_part() -> None:
    layer = SummaryLayer(parts=("first", "second"), ledger=ArtifactLedger())
    noted = layer.with_note("Two more messages were dropped.")
    assert noted.parts == ("first", "second\n\nTwo more messages were dropped.")


def test_a_changed_task_is_shown_and_empty_fields_keep_earlier_values() -> None:
    shown, carried = part_fields(
        {"task_overview": "Also fix the lexer.", "current_state": "done", "next_steps": ""},
        {"task_overview": "Fix the parser.", "next_steps": "Ship it."},
    )
    assert shown["task_overview"] == "# Task changes\nAlso fix the lexer.\n\n"
    assert carried == {
        "task_overview": "Also fix the lexer.",
        "current_state": "done",
        "next_steps": "Ship it.",
    }
    shown, carried = part_fields({"task_overview": "  "}, {"task_overview": "Fix the parser."})
    assert shown["task_overview"] == ""
    assert carried["task_overview"] == "Fix the parser."


async def test_the_extractive_part_covers_the_new_messages_alone() -> None:
    previous = Msg(
        "summary",
        "<system-reminder>Summary.\n# Task overview\nFix the parser.\n\n# Important discoveries\n"
        "OldError: boom in src/old.py</system-reminder>",
        "user",
    )
    request = SummaryRequest(
        messages=[Msg("user", "ValueError: bad token in src/lexer.py", "user")],
        previous=previous,
        instructions="",
        hints=(),
        schema=SummarySchema.model_json_schema(),
        previous_stays=True,
    )
    fields = (await ExtractiveSummarizer().summarize(request)).fields
    assert fields["task_overview"] == ""
    assert "src/lexer.py" in fields["important_discoveries"]
    assert "OldError" not in "\n".join(fields.values())
    folded = await ExtractiveSummarizer().summarize(
        SummaryRequest(**{**request.__dict__, "previous_stays": False})
    )
    assert folded.fields["task_overview"] == "Fix the parser."
    assert "src/old.py" in folded.fields["important_discoveries"]


def kept_commands(engine: ContextEngine) -> set[str]:
    return {str(c.input["command"]) for m in engine.context for c in m.tool_calls}


async def _commands(engine: ContextEngine, prefix: str, n: int) -> list[str]:
    """``n`` tool exchanges, each running one distinct command; the commands."""
    commands = [f"cat src/{prefix}_{i}.py" for i in range(n)]
    for command in commands:
        asst = call("bash")
        asst.tool_calls[0].input["command"] = command
        engine.append(asst)
        await engine.add_tool_results(results(asst, "ok"))
    return commands


async def _command_spans(first: int, second: int) -> tuple[Msg, list[str]]:
    """Two compactions over spans of ``first`` then ``second`` distinct commands: the
    summary, and the commands of the second span that were compressed. The ledger's budget
    does not grow here (``ledger_max_ratio`` at ``ledger_ratio``, 0.1): the room rule alone."""
    engine, _ = make_engine(
        [PART, PART],
        context_size=4000,
        offloader=RecordingOffloader(),
        layer=LayerConfig(update="append", ledger_ratio=0.1, ledger_max_ratio=0.1),
    )
    await _commands(engine, "first", first)
    await engine.compress(SYSTEM, force=True)
    commands = await _commands(engine, "second", second)
    await engine.compress(SYSTEM, force=True)
    assert engine.summary is not None
    compressed = [c for c in commands if c not in kept_commands(engine)]
    assert compressed
    return engine.summary, compressed


async def test_a_part_without_room_for_the_new_facts_becomes_a_rewrite() -> None:
    # The first summary's ledger leaves room for a part, but not for all the new commands
    # a rewrite would list: appending would lose some, so the compaction rewrites.
    layer, compressed = await _command_spans(20, 20)
    assert len(SummaryLayer.from_msg(layer).parts) == 1
    assert all(c in layer.text for c in compressed)


async def test_a_part_with_room_for_the_new_facts_is_appended() -> None:
    layer, compressed = await _command_spans(4, 10)
    assert len(SummaryLayer.from_msg(layer).parts) == 2
    assert all(c in SummaryLayer.from_msg(layer).parts[-1] for c in compressed)


async def test_a_part_too_long_for_the_room_left_becomes_a_rewrite() -> None:
    # The layer has room for a part, and the window for a longer layer, but the
    # summarizer writes a part longer than that room: cutting it would lose the newest
    # facts, so the summarizer is asked again for one summary of the whole layer, without
    # the update hint.
    engine, model = make_engine(
        [summary()], context_size=8000, offloader=RecordingOffloader(), summary_update="append"
    )
    engine.append(user("Fix the failing parser in src/parser.py."))
    await span(engine, "src/parser.py")
    assert await engine.compress(SYSTEM, force=True) is not None
    assert engine.summary is not None
    counter = model.token_counter
    room = summary_budget(ContextConfig(), 8000) - counter.count_message(engine.summary)
    model.add(summary(task_overview="", important_discoveries=words(room + 200, "fact")), PART)
    await span(engine, "src/lexer.py")
    assert await engine.compress(SYSTEM, force=True) is not None

    assert engine.summary is not None
    assert len(SummaryLayer.from_msg(engine.summary).parts) == 1
    assert "Patched tokenize()" in engine.summary.text
    assert "fact1" not in engine.summary.text
    asked = [r for r in model.requests if r.is_summary]
    assert len(asked) == 3
    assert DEFAULT_SUMMARY_UPDATE_PROMPT in "\n".join(m.text for m in asked[1].messages)
    assert DEFAULT_SUMMARY_UPDATE_PROMPT not in "\n".join(m.text for m in asked[2].messages)


async def _rewrite_of_commands(fields: dict[str, str]) -> tuple[Msg, list[str], ContextEngine]:
    """One rewritten summary over 40 distinct commands, the ledger's own budget far below
    them (``ledger_ratio`` 0.03 of 4,000: 120 tokens), the summary's 1,500."""
    engine, _ = make_engine(
        [fields],
        context_size=4000,
        offloader=RecordingOffloader(),
        layer=LayerConfig(update="rewrite", ledger_ratio=0.03, ledger_max_ratio=0.03),
    )
    commands = await _commands(engine, "grown", 40)
    await engine.compress(SYSTEM, force=True)
    assert engine.summary is not None
    compressed = [c for c in commands if c not in kept_commands(engine)]
    return engine.summary, compressed, engine


async def test_the_ledger_grows_into_the_room_the_summarizers_fields_leave() -> None:
    # Fields the summarizer left short (the `none` summarizer: empty) leave most of the
    # summary's budget unused while the ledger drops commands at its own budget; each one
    # dropped is lost from every later request.
    empty = dict.fromkeys(summary(), "")
    layer, compressed, engine = await _rewrite_of_commands(empty)
    assert len(compressed) >= 30
    assert all(c in layer.text for c in compressed)
    counter = engine.counter
    assert counter.count_message(layer) <= summary_budget(ContextConfig(), 4000)


async def test_the_ledger_never_grows_into_the_fields_room() -> None:
    full = summary(important_discoveries=words(1200, "found"))
    layer, compressed, _ = await _rewrite_of_commands(full)
    assert full["important_discoveries"] in layer.text  # uncut
    assert not all(c in layer.text for c in compressed)


async def test_a_ledger_grown_past_its_own_budget_is_extended_not_rewritten() -> None:
    # A rewrite grows the ledger into the room the fields leave, past the ledger's own
    # budget. The next compaction then always rewrote the whole layer (the ledger's own
    # budget counted as full), even with room left for a part: the summary the provider
    # had cached changed at every compaction. Nothing listed is dropped here, so the layer
    # is extended: its text so far stays, word for word, as the prefix.
    empty = dict.fromkeys(summary(), "")
    engine, _ = make_engine(
        [empty, empty],
        context_size=4000,
        offloader=RecordingOffloader(),
        layer=LayerConfig(update="append", ledger_ratio=0.03, ledger_max_ratio=0.03),
    )
    await _commands(engine, "first", 30)
    await engine.compress(SYSTEM, force=True)
    before = engine.summary
    assert before is not None
    listed = SummaryLayer.from_msg(before).ledger
    assert engine.counter.count_text(listed.render()) > 0.03 * 4000  # grown past its own
    await _commands(engine, "second", 4)
    await engine.compress(SYSTEM, force=True)
    after = engine.summary
    assert after is not None
    parts = SummaryLayer.from_msg(after).parts
    assert parts[:-1] == SummaryLayer.from_msg(before).parts
    assert parts[-1].startswith("<system-reminder>Update to the summary above")
