"""``ContextEngine(readback=False)``: every note the engine writes into the model's input
says where content went, or that it was omitted, and names no read-back tool (issue 26,
point 6). The default wording is pinned by the golden tests; each test here also checks
the default still names the tools, so the flag is what changes it."""

from __future__ import annotations

import re

import pytest

from contextfold.context import ArtifactLedger, ContextConfig, ContextEngine, ToolResultTruncator
from contextfold.context._masking import mask_message
from contextfold.context._summary import fallback_summary
from contextfold.context._trim import image_placeholder
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.token import counter_for_model
from contextfold.workspace import MemoryWorkspace

TOOLS = re.compile(r"\b(Read|Grep|Glob|Search)\b|refer to the file|read (it|them) from")
COUNTER = counter_for_model("gpt-4o")
LONG = "\n".join(f"line {i}: status ok, latency {i} ms" for i in range(200))


def _result(call: str = "c1") -> Msg:
    return Msg.of_blocks("tool", [ToolResultBlock(id=call, name="fetch", output=LONG)], "user")


@pytest.mark.parametrize("readback", [True, False])
async def test_the_engines_notes_name_tools_only_when_the_model_has_them(readback: bool) -> None:
    """Truncation, the summary (with its ledger and offload reference) and the usage note
    of a real engine on a small window."""
    engine = ContextEngine(
        counter=COUNTER,
        context_size=1200,
        offloader=MemoryWorkspace(),
        config=ContextConfig(tool_result_limit=150),
        readback=readback,
    )
    for i in range(8):
        engine.append(
            Msg("user", f"Check src/svc/mod{i}.py and run pytest tests/test_{i}.py", "user")
        )
        call = ToolCallBlock(id=f"c{i}", name="fetch", input={"path": f"src/svc/mod{i}.py"})
        engine.append(Msg.of_blocks("assistant", [call], "assistant"))
        await engine.add_tool_results(_result(f"c{i}"))
        model_input = await engine.prepare("You check services.")
    assert engine.compressions > 0
    text = "\n".join(
        m.model_dump_json()
        for m in (*([model_input.summary] if model_input.summary else []), *model_input.context)
    )
    named = sorted({m.group(0) for m in TOOLS.finditer(text)})
    if readback:
        assert "refer to the file" in named, text
        assert "Search" in named, text
    else:
        assert not named, text
        assert "The remaining content has been omitted for limited context." in text


@pytest.mark.parametrize("readback", [True, False])
def test_a_masked_result_names_no_tool_without_readback(readback: bool) -> None:
    masked = mask_message(_result(), {0: ("sessions/s/tool_result-c1.txt", 900)}, readback=readback)
    note = masked.tool_results[0].text()
    assert bool(TOOLS.search(note)) is readback, note
    assert "900 tokens" in note


@pytest.mark.parametrize("readback", [True, False])
def test_a_removed_image_names_no_tool_without_readback(readback: bool) -> None:
    note = image_placeholder(limit=5, ref="sessions/s/image-1.png", readback=readback)
    assert bool(TOOLS.search(note)) is readback, note
    assert "at most 5 images" in note


@pytest.mark.parametrize("readback", [True, False])
def test_the_fallback_note_names_no_tool_without_readback(readback: bool) -> None:
    ledger = ArtifactLedger().merge([("file", "src/svc/mod.py")])
    text = fallback_summary(
        removed=4,
        ref="sessions/s/context.jsonl",
        error=RuntimeError("down"),
        previous=None,
        ledger=ledger,
        counter=COUNTER,
        budget=500,
        readback=readback,
    )
    assert bool(TOOLS.search(text)) is readback, text
    assert "src/svc/mod.py" in text
    if not readback:
        assert "saved outside this conversation" in text


def test_a_truncated_result_without_readback_ends_with_the_marker_naming_no_file() -> None:
    truncator = ToolResultTruncator(COUNTER, limit=150, keep="head_tail", readback=False)
    block = _result().tool_results[0]
    cut = truncator.cut(block, ref="sessions/s/tool_result-c1.txt")
    assert cut.text().endswith(
        "<system-reminder>The remaining content has been omitted for limited context."
        "</system-reminder>"
    )
    assert "sessions/s" not in cut.text()
