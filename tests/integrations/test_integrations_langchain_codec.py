"""The LangChain codec: a summary written into LangChain's state reads back as it was."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")

from contextfold.context._ledger import ArtifactLedger
from contextfold.context._summary import summary_msg, summary_parts
from contextfold.integrations.langchain import LangChainCodec
from contextfold.message import TextBlock


def test_a_summary_of_several_parts_reads_back_part_for_part() -> None:
    # With summary_update="append" the summary is several text blocks; read back as one
    # text after a restart, the next append would keep them as one earlier part, and the
    # request's prefix would no longer match the one the provider cached.
    layer = summary_msg(
        "second part",
        ArtifactLedger(),
        {"task_overview": "Fix the parser."},
        earlier=[TextBlock(text="first part")],
    )
    codec = LangChainCodec()
    (item,) = codec.from_msg(layer)
    ((restored, _),) = codec.to_msgs([item])
    assert [p.text for p in summary_parts(restored)] == ["first part", "second part"]
    assert restored.metadata == layer.metadata


def test_a_summary_of_one_part_reads_back_as_one_text() -> None:
    layer = summary_msg("the only part", ArtifactLedger(), None)
    codec = LangChainCodec()
    (item,) = codec.from_msg(layer)
    ((restored, _),) = codec.to_msgs([item])
    assert restored.text == "the only part"
    assert [p.text for p in summary_parts(restored)] == ["the only part"]
