"""Every framework codec: a summary layer written into the framework's history reads back
as it was, part for part (a resumed thread must send what the provider cached), through
:class:`~contextfold.context.SummaryLayer`."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.context import ArtifactLedger, SummaryLayer, is_summary
from contextfold.message import Msg


def _langchain() -> Any:
    pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")
    from contextfold.integrations.langchain import LangChainCodec

    return LangChainCodec()


def _pydantic_ai() -> Any:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from contextfold.integrations.pydantic_ai import PydanticAICodec

    return PydanticAICodec()


def _openai_agents() -> Any:
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from contextfold.integrations.openai_agents import AgentsCodec

    return AgentsCodec()


@pytest.fixture(
    params=[_langchain, _pydantic_ai, _openai_agents],
    ids=["langchain", "pydantic_ai", "openai_agents"],
)
def codec(request: pytest.FixtureRequest) -> Any:
    return request.param()


def round_trip(codec: Any, msg: Msg) -> Msg:
    """``msg`` written as the framework's history, then read back."""
    (item,) = codec.from_msg(msg)
    ((restored, _),) = codec.to_msgs([item])
    assert isinstance(restored, Msg)
    return restored


LEDGER = ArtifactLedger().merge([("file", "src/parser.py"), ("command", "pytest -x")])


def test_a_summary_of_several_parts_reads_back_part_for_part(codec: Any) -> None:
    # With summary_update="append" the summary is several text blocks; read back as one
    # text after a restart, the next append would keep them as one earlier part, and the
    # request's prefix would no longer match the one the provider cached.
    layer = SummaryLayer(
        parts=("first part", "second part"),
        ledger=LEDGER,
        fields={"task_overview": "Fix the parser."},
        refs=("sessions/s/context.jsonl",),
    )
    restored = round_trip(codec, layer.msg)
    assert is_summary(restored)
    assert SummaryLayer.from_msg(restored) == layer


def test_a_summary_of_one_part_reads_back_as_one_text(codec: Any) -> None:
    layer = SummaryLayer(parts=("the only part",))
    restored = round_trip(codec, layer.msg)
    assert restored.content == "the only part"
    assert SummaryLayer.from_msg(restored) == layer


def test_a_summary_saved_by_the_previous_version_still_reads_as_a_layer() -> None:
    # LangChain checkpoints written before the layer had a type carry the summary
    # message's metadata; they resume as the same layer.
    pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")
    from langchain_core.messages import HumanMessage

    from contextfold.integrations.langchain import LangChainCodec

    metadata = {"contextfold": "summary", "ledger": LEDGER.model_dump(), "fields": {"a": "b"}}
    item = HumanMessage(
        content=[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        additional_kwargs={"contextfold": {"metadata": metadata}},
    )
    ((restored, _),) = LangChainCodec().to_msgs([item])
    assert SummaryLayer.from_msg(restored) == SummaryLayer(
        parts=("one", "two"), ledger=LEDGER, fields={"a": "b"}
    )
