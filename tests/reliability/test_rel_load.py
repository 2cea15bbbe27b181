"""Load: 100 concurrent agent sessions in one process sharing one workspace.

Every session compresses (summary + offload of the compressed messages) and truncates
large tool results (offloaded whole) several times. Afterwards each session's store holds
exactly its own messages, in order, once; its tool results and saved state are its own.
Throughput is printed (and recorded for ``BENCHMARKS.md``); nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextfold.agent import Agent
from contextfold.context import ContextConfig, TruncationEvent
from contextfold.tool import Toolkit
from contextfold.workspace import BaseWorkspace, LocalWorkspace, PostgresWorkspace

from .rel_support import (
    Added,
    assert_nothing_lost,
    assert_provider_valid,
    filler,
    make_agent,
    offloaded,
    record,
    scaled,
    scripted,
    smart_script,
)

SESSIONS = 100
TURNS = 8


@pytest.fixture(params=["local", "postgres"])
async def shared_ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseWorkspace]:
    if request.param == "local":
        ws: BaseWorkspace = LocalWorkspace(tmp_path / "ws")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        ws = PostgresWorkspace(dsn, table_prefix=f"l{uuid.uuid4().hex[:10]}_")
    await ws.initialize()
    try:
        yield ws
    finally:
        await ws.close()


def _toolkit(tag: str) -> Toolkit:
    kit = Toolkit()

    @kit.register
    def dump(n: int) -> str:
        """A long log.

        Args:
            n: Seed.
        """
        return "\n".join(f"{tag} log {n} line {i}" for i in range(200))

    return kit


async def _session(ws: BaseWorkspace, k: int, truncations: list[str]) -> tuple[Agent, Added]:
    tag = f"s{k:03d}"
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, tool_result_limit=150)
    model = scripted(smart_script(tag, tool="dump", every=2))
    agent = make_agent(
        model, offloader=ws, config=config, toolkit=_toolkit(tag), session_id=f"load-{tag}"
    )
    added = Added(agent.engine)

    def on_event(event: object) -> None:
        if isinstance(event, TruncationEvent) and event.offload_ref:
            truncations.append(f"{tag}\t{event.offload_ref}")

    agent.engine.on_event = on_event
    for turn in range(scaled(TURNS)):
        await agent.reply(f"{tag} turn {turn} " + filler(turn, 60))
    await agent.save_session()
    return agent, added


async def test_hundred_sessions_share_a_workspace_without_losing_or_crossing_data(
    shared_ws: BaseWorkspace,
) -> None:
    truncations: list[str] = []
    started = time.perf_counter()
    results = await asyncio.gather(*(_session(shared_ws, k, truncations) for k in range(SESSIONS)))
    elapsed = time.perf_counter() - started

    sessions = set(await shared_ws.list_sessions())
    messages = compressions = 0
    for k, (agent, added) in enumerate(results):
        tag = f"s{k:03d}"
        assert agent.session_id in sessions
        assert agent.engine.compressions >= 2, f"{tag} did not compress repeatedly"
        assert_provider_valid(agent)
        stored = await offloaded(shared_ws, agent.session_id)
        assert_nothing_lost(added.ids, [m.id for m in stored], [m.id for m in agent.context])
        for m in [*stored, *agent.context]:
            for word in re.findall(r"\bs\d{3}\b", m.text):
                assert word == tag, f"{tag}'s history holds a message of {word}"
        saved = await shared_ws.load_state(agent.session_id)
        assert saved is not None
        assert f'"session_id":"{agent.session_id}"' in saved
        messages += len(added.ids)
        compressions += agent.engine.compressions
    assert len(truncations) >= SESSIONS
    for line in truncations:
        tag, ref = line.split("\t")
        text = await shared_ws.read(ref)
        assert f"{tag} log" in text
        assert not re.search(rf"\bs(?!{tag[1:]})\d{{3}} log", text)

    kind = type(shared_ws).__name__
    print(
        f"\n[load {kind}] {SESSIONS} sessions x {scaled(TURNS)} replies in {elapsed:.2f}s: "
        f"{messages / elapsed:.0f} messages/s, {compressions / elapsed:.1f} compressions/s, "
        f"{len(truncations) / elapsed:.1f} tool-result offloads/s "
        f"({messages} messages, {compressions} compressions, {len(truncations)} offloads)"
    )
    record("load", f"concurrent sessions [{kind}]", SESSIONS)
    record("load", f"messages [{kind}]", messages)
    record("load", f"compressions [{kind}]", compressions)
