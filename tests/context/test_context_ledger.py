"""Artifact ledger and summarizer transcript: deterministic extraction and rendering."""

from __future__ import annotations

from contextfold.context._ledger import ArtifactLedger, extract_ledger
from contextfold.context._summarizer import transcript_entry
from contextfold.message import Msg, TextBlock, ToolCallBlock

from .ctx_support import call, results, user


def test_ledger_extracts_paths_commands_errors_and_symbols() -> None:
    asst = Msg(
        "a",
        [
            TextBlock(text="Edit `parse_header()` in requests/utils.py"),
            ToolCallBlock(id="c1", name="bash", input={"command": "python -m pytest tests/"}),
        ],
        "assistant",
    )
    msgs = [
        user("The bug is in /repo/src/app/models.py line 40"),
        asst,
        results(asst, "E   KeyError: 'content-length'\ndef prepare_body(self, data):\n"),
    ]
    ledger = extract_ledger(msgs)
    assert "/repo/src/app/models.py" in ledger.files
    assert "requests/utils.py" in ledger.files
    assert ledger.commands == ["python -m pytest tests/"]
    assert ledger.errors == ["E KeyError: 'content-length'"]
    assert {"parse_header", "prepare_body"} <= set(ledger.symbols)


def test_ledger_is_deterministic() -> None:
    msgs = [user("see a/b.py and c/d.py; ValueError: x"), user("a/b.py again")]
    assert extract_ledger(msgs) == extract_ledger(msgs)
    assert extract_ledger(msgs).files == ["c/d.py", "a/b.py"]  # most recent last


def test_ledger_merge_dedupes_and_keeps_the_newest() -> None:
    old = ArtifactLedger(files=[f"f{i}.py" for i in range(40)])
    merged = old.merge(ArtifactLedger(files=["f0.py", "new.py"]))
    assert merged.files[-2:] == ["f0.py", "new.py"]
    assert len(merged.files) == 40
    assert "f1.py" not in merged.files


def test_urls_are_not_files() -> None:
    assert extract_ledger([user("see https://example.com/a/b.html")]).files == []


def test_empty_ledger_renders_nothing() -> None:
    assert ArtifactLedger().render() == ""


def test_transcript_shows_tool_traffic_as_text() -> None:
    asst = call("read", text="reading")
    entry = transcript_entry(asst)
    call_id = asst.tool_calls[0].id
    assert entry == f'[assistant assistant]\nreading\n(tool call {call_id}: read) {{"arg": "read"}}'
    result = transcript_entry(results(asst, "file body"))
    assert result == f"[user tool]\n(tool result {call_id}: read) file body"


def test_ledger_error_is_the_whole_line_holding_the_marker_once() -> None:
    text = "ok\n  at step 3 FAILED with ValueError: bad\nnext\nTraceback (most recent call last)"
    ledger = extract_ledger([user(text)])
    assert ledger.errors == [
        "at step 3 FAILED with ValueError: bad",
        "Traceback (most recent call last)",
    ]


def test_ledger_keyword_inside_a_word_is_no_definition_but_the_next_one_is() -> None:
    ledger = extract_ledger([user("undef class Foo and xfn bar")])
    assert ledger.symbols == ["Foo"]


def test_ledger_paths_keep_their_edges_across_whitespace_and_punctuation() -> None:
    text = "see (src/a.py) and\tlib/b/c.txt:12, not http://x.org/y.html; file d.json."
    assert extract_ledger([user(text)]).files == ["src/a.py", "lib/b/c.txt", "d.json"]
