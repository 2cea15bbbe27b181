"""SummaryLayer: one typed value for the summary, converted to and from a message and a
JSON document exactly, and the only code that reads the summary's metadata."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold import MessageFormatError
from contextfold.context import ArtifactLedger, ContextConfig, LayerConfig, SummaryLayer, is_summary
from contextfold.context._layer import ledger_budget, select_requests, summary_budget
from contextfold.token import OpenAITokenCounter

SRC = Path(__file__).resolve().parents[2] / "src" / "contextfold"
LAYER_MODULE = SRC / "context" / "_layer.py"
_KEYS = {"ledger", "fields", "refs", "requests"}

texts = st.text(min_size=1, max_size=40)
facts = st.lists(
    st.tuples(st.sampled_from(["file", "command", "error", "symbol"]), texts), max_size=6
)
layers = st.builds(
    SummaryLayer,
    parts=st.lists(texts, min_size=1, max_size=4).map(tuple),
    ledger=facts.map(lambda found: ArtifactLedger().merge(found)),
    fields=st.none() | st.dictionaries(st.sampled_from(["a", "b", "c"]), texts, max_size=3),
    refs=st.lists(texts, max_size=3).map(tuple),
    requests=st.lists(texts, max_size=3).map(tuple),
)


@given(layers)
def test_a_layer_reads_back_from_its_json_document(layer: SummaryLayer) -> None:
    document = json.loads(json.dumps(layer.to_json()))
    assert SummaryLayer.from_json(document) == layer


@given(layers)
def test_a_layer_reads_back_from_its_message(layer: SummaryLayer) -> None:
    msg = layer.to_msg()
    assert is_summary(msg)
    assert SummaryLayer.from_msg(msg) == layer
    assert SummaryLayer.from_msg(msg).msg is msg  # the caller's message, its cached counts


@given(layers, texts)
def test_appending_keeps_every_earlier_part_word_for_word(layer: SummaryLayer, text: str) -> None:
    grown = layer.appended(text, ledger=layer.ledger, fields=None, ref="ref", requests=["asked"])
    assert grown.parts[:-1] == layer.parts
    assert grown.parts[-1] == text
    assert grown.refs == (*layer.refs, "ref")
    assert grown.requests == (*layer.requests, "asked")


@settings(deadline=None)  # the first call loads the tokenizer
@given(
    st.lists(st.text(min_size=1, max_size=300), max_size=5),
    st.lists(st.text(min_size=1, max_size=300), max_size=5),
    st.integers(min_value=0, max_value=200),
)
def test_the_newest_requests_are_kept_whole_within_the_budget(
    earlier: list[str], new: list[str], budget: int
) -> None:
    counter = OpenAITokenCounter()
    kept = select_requests(earlier, new, counter, budget)
    everything = [*earlier, *new]
    assert sum(counter.count_text(t) for t in kept) <= budget
    # A suffix of everything asked: all but (maybe) the oldest kept are word for word.
    whole = kept[1:] if kept and kept[0] not in everything else kept
    assert list(whole) == everything[len(everything) - len(whole) :]
    if len(kept) < len(everything) and kept and kept[0] in everything:
        # The next older one did not fit, and too little was left to cut it.
        skipped = everything[-len(kept) - 1]
        left = budget - sum(counter.count_text(t) for t in kept)
        assert counter.count_text(skipped) > left


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ([], "JSON object"),
        ({"version": 9, "parts": ["a"]}, "version"),
        ({"version": 1, "parts": []}, "parts"),
        ({"version": 1, "parts": ["a", 3]}, "parts"),
        ({"version": 1, "parts": ["a"], "fields": "x"}, "fields"),
        ({"version": 1, "parts": ["a"], "refs": [1]}, "refs"),
        ({"version": 1, "parts": ["a"], "requests": "x"}, "requests"),
        ({"version": 1, "parts": ["a"], "ledger": {"entries": "x"}}, "ledger"),
    ],
)
def test_a_malformed_document_is_refused_naming_what_is_wrong(
    document: object, complaint: str
) -> None:
    with pytest.raises(MessageFormatError, match=complaint):
        SummaryLayer.from_json(document)  # type: ignore[arg-type]


def metadata_readers(source: str) -> list[str]:
    """Places in ``source`` that read or write a summary's metadata keys, or make a
    summary marker, by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "SUMMARY":
            found.append(f"line {node.lineno}: Marker.SUMMARY")
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        if key in _KEYS and "metadata" in ast.unparse(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_the_layer_reads_the_summary_metadata() -> None:
    # The marker itself is the message layer's (message/ defines it and its validity
    # rules find the summary by it); everything else asks SummaryLayer or is_summary.
    offenders = {
        str(path.relative_to(SRC)): metadata_readers(path.read_text())
        for path in SRC.rglob("*.py")
        if path != LAYER_MODULE and path.parent.name != "message"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize(
    "bypass",
    [
        'fields = msg.metadata.get("fields")',
        'ledger = summary.metadata["ledger"]',
        'msg.metadata["refs"] = []',
        "is_it = marker_of(msg) is Marker.SUMMARY",
    ],
)
def test_the_metadata_check_catches_a_bypass(bypass: str) -> None:
    assert metadata_readers(bypass) != []


def test_the_ledger_budget_grows_with_the_run_up_to_its_ceiling() -> None:
    config = ContextConfig(layer=LayerConfig(ledger_ratio=0.1))
    grown = [ledger_budget(config, 16_000, n) for n in range(8)]
    assert grown[:7] == [1600, 2000, 2400, 2800, 3200, 3600, 4000]
    assert grown[-1] == 4000
    fixed = ContextConfig(layer=LayerConfig(ledger_ratio=0.1, ledger_max_ratio=0.05))
    assert ledger_budget(fixed, 16_000, 5) == 1600  # never below ledger_ratio
    small = ContextConfig(trigger_ratio=0.3)
    assert ledger_budget(small, 16_000, 8) == summary_budget(small, 16_000) * 3 // 4


def test_a_long_runs_commands_are_not_dropped_by_a_ledger_still_growing() -> None:
    # A command a rewrite drops is lost from every later request, and growing from a
    # tenth of the window dropped them at the early rewrites of the long runs (whole-run
    # commands at 16k: 92% kept). By default the ledger starts where a span of seventy
    # commands fits and reaches its ceiling at the next compaction.
    from contextfold.context._facts import extract_ledger
    from contextfold.message import Msg, ToolCallBlock, ToolResultBlock

    span: list[Msg] = []
    for n in range(70):
        command = f"grep -n 'def handler_{n}' src/package/module_{n}.py | head -n 20"
        span.append(
            Msg(
                "a",
                [ToolCallBlock(id=f"c{n}", name="bash", input={"command": command})],
                "assistant",
            )
        )
        span.append(
            Msg(
                "t",
                [ToolResultBlock(id=f"c{n}", name="bash", output="x", metadata={"returncode": 0})],
                "user",
            )
        )
    config, counter = ContextConfig(), OpenAITokenCounter()
    ledger = ArtifactLedger().merge(extract_ledger(span))
    assert counter.count_text(ledger.render()) > 1600
    chosen = ledger.select(counter, ledger_budget(config, 16_000, 0))
    assert len([e for e in chosen.entries if e.kind == "command"]) == 70
    assert ledger_budget(config, 16_000, 1) == 4000
