"""Every framework codec: a summary written into the framework's history reads back as it
was, part for part (a resumed thread must send what the provider cached)."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.context._ledger import ArtifactLedger
from contextfold.context._summary import summary_msg, summary_parts
from contextfold.message import Msg, TextBlock


def _langchain() -> Any:
    pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")
    from contextfold.integrations.langchain import LangChainCodec

    return LangChainCodec()


def _pydantic_ai() -> Any:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from contextfold.integrations.pydantic_ai import PydanticAICodec

    return PydanticAICodec()


@pytest.fixture(params=[_langchain, _pydantic_ai], ids=["langchain", "pydantic_ai"])
def codec(request: pytest.FixtureRequest) -> Any:
    return request.param()


def round_trip(codec: Any, msg: Msg) -> Msg:
    """``msg`` written as the framework's history, then read back."""
    (item,) = codec.from_msg(msg)
    ((restored, _),) = codec.to_msgs([item])
    assert isinstance(restored, Msg)
    return restored


def test_a_summary_of_several_parts_reads_back_part_for_part(codec: Any) -> None:
    # With summary_update="append" the summary is several text blocks; read back as one
    # text after a restart, the next append would keep them as one earlier part, and the
    # request's prefix would no longer match the one the provider cached.
    layer = summary_msg(
        "second part",
        ArtifactLedger(),
        {"task_overview": "Fix the parser."},
        earlier=[TextBlock(text="first part")],
    )
    restored = round_trip(codec, layer)
    assert [p.text for p in summary_parts(restored)] == ["first part", "second part"]
    assert restored.metadata == layer.metadata


def test_a_summary_of_one_part_reads_back_as_one_text(codec: Any) -> None:
    restored = round_trip(codec, summary_msg("the only part", ArtifactLedger(), None))
    assert restored.content == "the only part"
    assert restored.text == "the only part"
    assert [p.text for p in summary_parts(restored)] == ["the only part"]
