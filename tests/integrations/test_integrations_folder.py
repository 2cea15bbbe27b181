"""HistoryFolder: the engine behind a history it does not own (a codec of ``Msg`` itself)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Hashable, Sequence

import pytest

from contextfold.context import ContextConfig, ContextEngine, ExtractiveSummarizer
from contextfold.integrations import HistoryFolder
from contextfold.message import READBACK_KEY, Msg, ToolCallBlock, ToolResultBlock
from contextfold.token import OpenAITokenCounter
from contextfold.workspace import MemoryWorkspace


class MsgCodec:
    """Items are messages already: the folder's bookkeeping alone is under test."""

    def __init__(self) -> None:
        self.converted: list[Msg] = []

    def key(self, item: Msg) -> Hashable:
        return item.id

    def to_msgs(self, items: Sequence[Msg]) -> list[tuple[Msg, list[Msg]]]:
        return [(m, [m]) for m in items]

    def from_msg(self, msg: Msg) -> list[Msg]:
        self.converted.append(msg)
        return [msg]


def engine(workspace: MemoryWorkspace | None = None, *, size: int = 4000) -> ContextEngine:
    return ContextEngine(
        counter=OpenAITokenCounter("o200k_base"),
        context_size=size,
        summarizer=ExtractiveSummarizer(),
        offloader=workspace,
        config=ContextConfig(tool_result_limit=200, trigger_ratio=0.8, reserve_ratio=0.2),
    )


def exchange(i: int, output: str = "ok", name: str = "cat") -> list[Msg]:
    call = ToolCallBlock(id=f"c{i}", name=name, input={"path": f"f{i}"})
    # The result carries no name, as in formats that name only the call.
    result = ToolResultBlock(id=f"c{i}", name="", output=output)
    return [Msg("assistant", [call], "assistant"), Msg("tool", [result], "user")]


async def test_only_new_items_are_fed_and_unchanged_ones_are_returned_as_they_were() -> None:
    codec = MsgCodec()
    folder = HistoryFolder(engine(), codec, rewrites_history=False)
    history = [Msg("user", "start", "user"), *exchange(0)]
    first = await folder.fold(history, "system")
    history += exchange(1)
    second = await folder.fold(history, "system")
    assert first.request == history[:3]
    assert second.request == history
    assert all(a is b for a, b in zip(second.request, history, strict=True))
    assert codec.converted == []
    assert len(folder.engine.context) == 5


async def test_results_are_named_after_their_calls_and_read_backs_are_marked() -> None:
    folder = HistoryFolder(engine(), MsgCodec(), rewrites_history=False, readback_names=["Read"])
    history = [Msg("user", "start", "user"), *exchange(0), *exchange(1, name="Read")]
    await folder.fold(history, "system")
    results = [r for m in folder.engine.context for r in m.tool_results]
    assert [r.name for r in results] == ["cat", "Read"]
    assert [r.metadata.get(READBACK_KEY) for r in results] == [None, True]


async def test_a_long_result_is_cut_offloaded_and_converted() -> None:
    workspace = MemoryWorkspace()
    codec = MsgCodec()
    folder = HistoryFolder(engine(workspace), codec, rewrites_history=True)
    long = "\n".join(f"line {i}: some output here" for i in range(300))
    folded = await folder.fold([Msg("user", "start", "user"), *exchange(0, long)], "system")
    assert folded.changed
    (cut,) = codec.converted
    assert "tool_result-c0.txt" in cut.tool_results[0].text()
    assert folded.history[-1] is cut
    assert long in await workspace.read(cut.tool_results[0].text().split("'")[-2])


async def test_a_rewritten_history_is_followed_from_what_the_folder_returned() -> None:
    folder = HistoryFolder(engine(size=1500), MsgCodec(), rewrites_history=True)
    history = [Msg("user", "start " * 300, "user")]
    for i in range(16):
        history += exchange(i, "output " * 80)
        folded = await folder.fold(history, "system")
        history = list(folded.history)
    assert folder.engine.compressions >= 1
    assert folded.history[0] is folder.engine.summary
    # Each call fed only the newest exchange: nothing was read again from the start.
    assert len(folder.engine.context) == len(history) - 1


async def test_a_history_that_does_not_extend_the_last_one_is_read_again() -> None:
    folder = HistoryFolder(engine(), MsgCodec(), rewrites_history=False)
    await folder.fold([Msg("user", "one", "user"), *exchange(0)], "system")
    other = [Msg("user", "another conversation", "user")]
    folded = await folder.fold(other, "system")
    assert folded.request == other
    assert [m.text for m in folder.engine.context] == ["another conversation"]


async def test_a_summary_at_the_start_of_a_restored_history_becomes_the_summary() -> None:
    first = HistoryFolder(engine(size=1500), MsgCodec(), rewrites_history=True)
    history = [Msg("user", "start " * 300, "user")]
    for i in range(16):
        history = list((await first.fold([*history, *exchange(i, "output " * 80)], "s")).history)
    restored = HistoryFolder(engine(size=1500), MsgCodec(), rewrites_history=True)
    folded = await restored.fold(history, "s")
    assert restored.engine.summary is history[0]
    assert folded.history == history


async def test_the_usage_note_is_sent_but_not_stored() -> None:
    folder = HistoryFolder(engine(size=1000), MsgCodec(), rewrites_history=True)
    folded = await folder.fold([Msg("user", "word " * 700, "user")], "system")
    assert len(folded.request) == len(folded.history) + 1
    assert folded.request[-1].metadata.get("contextfold") == "usage_hint"


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("langchain", "langchain"),
        ("openai_agents", "openai-agents"),
        ("pydantic_ai", "pydantic-ai"),
        ("otel", "otel"),
    ],
)
def test_an_integration_without_its_extra_names_the_extra(module: str, extra: str) -> None:
    blocked = {
        "langchain": "langchain",
        "openai_agents": "agents",
        "pydantic_ai": "pydantic_ai",
        "otel": "opentelemetry",
    }[module]
    code = (
        "import sys\n"
        f"class Block:\n"
        f"    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {blocked!r}:\n"
        f"            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "try:\n"
        f"    import contextfold.integrations.{module}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("MissingDependencyError")
    assert f"pip install 'contextfold[{extra}]'" in out.stdout
