"""The read-back tool's store on its own: items kept once per conversation, pages read
from any offset, bad arguments answered as errors, and the in-memory store bounded."""

from __future__ import annotations

import asyncio

from contextfold.gateway import ResultStore
from contextfold.gateway._retrieval import Offload, item_id, read_arguments
from contextfold.token import AnthropicEstimator

TEXT = "\n".join(f"line {i}: " + "x" * 30 for i in range(200))


def test_items_are_kept_once_and_read_page_by_page() -> None:
    store = ResultStore()
    counter = AnthropicEstimator()
    item = item_id(TEXT)

    async def run() -> list[str]:
        assert await store.keep("k", [Offload(item, TEXT)]) == 1
        assert await store.keep("k", [Offload(item, TEXT)]) == 0  # resent: not stored again
        pages = []
        offset = 0
        while True:
            text, error = await store.answer(
                "k", {"id": item, "offset": offset}, page=200, counter=counter
            )
            assert not error
            header, body = text.split("\n", 1)
            pages.append(body)
            if "continue with offset" not in header:
                return pages
            offset = int(header.rsplit(" ", 1)[1].rstrip("]"))

    pages = asyncio.run(run())
    assert "".join(pages) == TEXT
    assert len(pages) > 3
    assert all(counter.count_text(p) <= 200 for p in pages)


def test_bad_arguments_and_other_conversations_get_errors() -> None:
    store = ResultStore()
    counter = AnthropicEstimator()
    item = item_id(TEXT)

    async def answers() -> list[tuple[str, bool]]:
        await store.keep("k", [Offload(item, TEXT)])
        return [
            await store.answer("other", {"id": item}, page=100, counter=counter),
            await store.answer("k", {"id": "../../etc/passwd"}, page=100, counter=counter),
            await store.answer("k", {"id": item, "offset": -1}, page=100, counter=counter),
            await store.answer("k", {"id": item, "offset": len(TEXT)}, page=100, counter=counter),
            await store.answer("k", "not an object", page=100, counter=counter),
        ]

    results = asyncio.run(answers())
    assert all(error for _, error in results)
    assert results[0][0] == f"no item {item} in this conversation"
    assert "past its end" in results[3][0]
    assert isinstance(read_arguments({"id": item}), tuple)


def test_the_in_memory_store_keeps_the_most_recent_conversations() -> None:
    store = ResultStore(sessions=2)
    counter = AnthropicEstimator()
    item = item_id(TEXT)

    async def run() -> list[bool]:
        for key in ("a", "b", "c"):
            await store.keep(key, [Offload(item, TEXT)])
        return [
            (await store.answer(key, {"id": item}, page=50, counter=counter))[1]
            for key in ("a", "b", "c")
        ]

    assert asyncio.run(run()) == [True, False, False]  # "a" was purged


def test_without_read_rounds_or_offload_results_are_only_cut() -> None:
    from contextfold.context import ExtractiveSummarizer
    from contextfold.gateway import READ_TOOL, SessionState, TransparentPolicy
    from contextfold.gateway._transparent import forward

    body = {
        "model": "m",
        "tools": [{"name": "bash", "description": "", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": TEXT}],
            },
        ],
    }

    def sent(policy: TransparentPolicy) -> dict[str, object]:
        done = asyncio.run(
            forward(
                body,
                SessionState(),
                policy,
                counter=AnthropicEstimator(),
                summarizer=ExtractiveSummarizer(),
            )
        )
        return {"tools": [t["name"] for t in done.body["tools"]], "offloads": len(done.offloads)}

    on = TransparentPolicy(window=1_000_000, tool_result_limit=200)
    assert sent(on) == {"tools": ["bash", READ_TOOL], "offloads": 1}
    for off in (
        TransparentPolicy(window=1_000_000, tool_result_limit=200, read_rounds=0),
        TransparentPolicy(window=1_000_000, tool_result_limit=200, offload=False),
        TransparentPolicy(window=1_000_000),
    ):
        assert sent(off) == {"tools": ["bash"], "offloads": 0}
