"""The summary's reference line and the usage hint tell the agent to use ``Search``."""

from __future__ import annotations

from contextfold.context import ArtifactLedger, ContextConfig
from contextfold.context._hint import usage_hint
from contextfold.context._summary import compose_summary
from contextfold.token import OpenAITokenCounter


def test_summary_reference_line_names_search() -> None:
    text = compose_summary(
        {"context_to_preserve": ""},
        config=ContextConfig(),
        counter=OpenAITokenCounter(),
        size=16000,
        ledger=ArtifactLedger(),
        ref="sessions/s1/context.jsonl",
        compressed=3,
    )
    assert (
        "The compressed messages are saved in 'sessions/s1/context.jsonl'; find details "
        "there with Search (by a few words), Grep or Read." in text
    )


def test_usage_hint_names_search() -> None:
    hint = usage_hint(tokens=800, context_size=1000, trigger_ratio=0.8, tool_enabled=False)
    assert "Search" in hint.text
    assert "stay readable in the workspace" in hint.text
