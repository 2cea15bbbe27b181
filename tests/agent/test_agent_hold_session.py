"""Agent.hold_session: the state saved after every step, the lease, resuming mid-reply."""

from __future__ import annotations

import asyncio
import json

import pytest

from contextfold import SessionLeasedError
from contextfold.model import ScriptedModel, ScriptedRequest, tool_reply
from contextfold.testing import MemoryWorkspace
from contextfold.tool import Toolkit
from contextfold.workspace import PostgresWorkspace

from .agent_support import make_agent


class Steps:
    """A three-step task: ``step(k)`` for k = 1..3, then an answer. The model picks the next
    step from the results it can see, as a real model would."""

    def __init__(self, *, block_on: int | None = None) -> None:
        self.runs: list[int] = []
        self.block_on = block_on
        self.blocked = asyncio.Event()
        self.kit = Toolkit()

        @self.kit.register
        async def step(k: int) -> str:
            """Do step k.

            Args:
                k: Which step.
            """
            self.runs.append(k)
            if k == self.block_on:
                self.blocked.set()
                await asyncio.sleep(3600)  # the worker dies here
            return f"step {k} done"

    @staticmethod
    def script(request: ScriptedRequest) -> object:
        done = [r.output for m in request.messages for r in m.tool_results]
        n = sum(1 for d in done if isinstance(d, str) and d.endswith("done"))
        return "all three done" if n == 3 else tool_reply(("step", {"k": n + 1}))


class CountingStore(MemoryWorkspace):
    def __init__(self) -> None:
        super().__init__()
        self.saved: list[dict[str, object]] = []

    async def save_state(self, session_id: str, state_json: str) -> None:
        await super().save_state(session_id, state_json)
        self.saved.append(json.loads(state_json))


async def test_the_state_is_saved_after_every_step() -> None:
    store, steps = CountingStore(), Steps()
    agent = make_agent(ScriptedModel(Steps.script), steps.kit, offloader=store)
    async with agent.hold_session("task") as resumed:
        assert not resumed
        await agent.reply("do the three steps")
    # the task message, three tool results, the answer, and once more on exit
    assert len(store.saved) == 6
    assert [len(s["context"]) for s in store.saved] == [1, 3, 5, 7, 8, 8]  # type: ignore[arg-type]
    assert agent.session_id == "task"
    assert not agent.awaiting_reply


async def test_a_resumed_worker_does_not_rerun_saved_steps() -> None:
    store, first = CountingStore(), Steps(block_on=3)
    dying = make_agent(ScriptedModel(Steps.script), first.kit, offloader=store)

    async def run() -> None:
        async with dying.hold_session("task"):
            await dying.reply("do the three steps")

    task = asyncio.create_task(run())
    await first.blocked.wait()
    task.cancel()  # the worker dies during step 3
    with pytest.raises(asyncio.CancelledError):
        await task

    second = Steps()
    agent = make_agent(ScriptedModel(Steps.script), second.kit, offloader=store)
    async with agent.hold_session("task") as resumed:
        assert resumed
        assert agent.awaiting_reply
        answer = await agent.reply()
    assert answer.text == "all three done"
    assert (first.runs, second.runs) == ([1, 2, 3], [3])


async def test_a_second_worker_on_a_leased_session_gets_a_clear_error(
    pg_dsn: str, pg_prefix: str
) -> None:
    a = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix)
    b = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix)
    await a.initialize()
    await b.initialize()
    first = make_agent(ScriptedModel(Steps.script), Steps().kit, offloader=a)
    second = make_agent(ScriptedModel(Steps.script), Steps().kit, offloader=b)
    async with first.hold_session("task"):
        with pytest.raises(SessionLeasedError, match="'task' is being run by another worker"):
            async with second.hold_session("task"):
                pytest.fail("two workers held one session")
        await first.reply("do the three steps")
    async with second.hold_session("task") as resumed:  # released on exit
        assert resumed
        assert not second.awaiting_reply
    await a.close()
    await b.close()
