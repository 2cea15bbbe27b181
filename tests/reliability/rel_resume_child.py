"""The worker processes of the resume test: an agent doing a numbered task on PostgreSQL + S3.

Started with ``fork``. The task is ``step(1)`` .. ``step(STEPS)`` and then an answer; the
scripted model picks the next step from what it can see (the tool results in its context,
and the summary, which says which step was done last), as a real model would. Each step
writes ``exec <k>`` to a side-effect log before it returns; each saved state writes
``stored <k>`` there for the step results it holds, and its message ids to an ack file.
Both files are appended with ``O_APPEND``, so their lines are in the order things happened.

The worker tells the parent where it is on a pipe: ``L`` (lease held), ``T`` (a tool call
started), ``C`` (a compression started), ``S`` (a state was saved), so the parent can
SIGKILL it during a tool call, during a compression, or between steps.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from contextfold import LeaseLostError
from contextfold.agent import Agent
from contextfold.context import ContextConfig, SummaryRequest, SummaryResult
from contextfold.message import Msg
from contextfold.model import ScriptedRequest, text_reply, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import BaseWorkspace, Lease

from ..workspace import _ws_proc
from .rel_support import make_agent, scripted

STEPS = 12
LEASE_TTL = 3.0
TASK = "Run the twelve steps in order, one tool call each, then report."
_DONE = re.compile(r"step (\d+) done")


@dataclass
class Pipes:
    """File descriptors the worker writes to (all opened by the parent)."""

    marks: int
    side: int
    acks: int
    go: int = -1
    """If set, wait for one byte on it after taking the lease (the parent's checks)."""


def last_done(texts: list[str]) -> int:
    """The highest step reported done in these texts (0 if none)."""
    return max((int(m) for t in texts for m in _DONE.findall(t)), default=0)


def _script(request: ScriptedRequest) -> Any:
    done = last_done([m.model_dump_json() for m in request.messages])
    if request.is_summary:  # not used: the summarizer below writes it
        raise AssertionError("unexpected summary request")
    if done >= STEPS:
        return text_reply(f"task complete: all {STEPS} steps done")
    return tool_reply(("step", {"k": done + 1}), text=f"now step {done + 1}")


class _SlowSummarizer:
    """Writes the summary from the folded messages (no model), slowly enough that a kill
    can land inside a compression; says ``C`` on the pipe as it starts."""

    def __init__(self, pipes: Pipes) -> None:
        self._pipes = pipes

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        os.write(self._pipes.marks, b"C\n")
        await asyncio.sleep(0.05)
        texts = [m.model_dump_json() for m in request.messages]
        if request.previous is not None:
            texts.append(request.previous.model_dump_json())
        done = last_done(texts)
        state = f"last completed: step {done} done" if done else "no step done yet"
        return SummaryResult(
            fields={
                "task_overview": TASK,
                "current_state": state,
                "important_discoveries": "each step prints a long log",
                "next_steps": f"run step {done + 1}" if done < STEPS else "report",
                "context_to_preserve": state,
            }
        )


def toolkit(pipes: Pipes) -> Toolkit:
    kit = Toolkit()

    @kit.register
    async def step(k: int) -> str:
        """Run step k of the task (prints a long log, truncated and offloaded).

        Args:
            k: The step number.
        """
        os.write(pipes.side, f"exec {k}\n".encode())
        os.write(pipes.marks, b"T\n")
        await asyncio.sleep(0.05)
        log = "\n".join(f"step {k} log line {i} " + "x" * 60 for i in range(300))
        return f"step {k} done\n{log}"

    return kit


def agent_for(ws: BaseWorkspace, pipes: Pipes) -> Agent:
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, tool_result_limit=150)
    return make_agent(
        scripted(_script, context_size=1800),
        offloader=ws,
        config=config,
        toolkit=toolkit(pipes),
        summarizer=_SlowSummarizer(pipes),
        max_iters=4 * STEPS,
    )


class AckingStore:
    """The workspace as the session store, acknowledging each save after it returned."""

    def __init__(self, ws: Any, pipes: Pipes) -> None:
        self._ws = ws
        self._pipes = pipes
        self._stored: set[int] = set()

    async def acquire_lease(self, session_id: str, **kwargs: Any) -> Lease:
        lease: Lease = await self._ws.acquire_lease(session_id, **kwargs)
        return lease

    async def load_state(self, session_id: str) -> str | None:
        state: str | None = await self._ws.load_state(session_id)
        return state

    async def save_state(self, session_id: str, state_json: str) -> None:
        await self._ws.save_state(session_id, state_json)
        state = json.loads(state_json)
        ids = [m["id"] for m in state["context"]]
        results = [json.dumps(m) for m in state["context"] if m["role"] == "user"]
        steps = {int(k) for t in results for k in _DONE.findall(t)} - self._stored
        self._stored |= steps
        if steps:
            os.write(self._pipes.side, "".join(f"stored {k}\n" for k in sorted(steps)).encode())
        os.write(self._pipes.acks, (json.dumps({"ids": ids}) + "\n").encode())
        os.write(self._pipes.marks, b"S\n")


async def _work(spec: dict[str, Any], session_id: str, pipes: Pipes, wait: float) -> int:
    ws = _ws_proc.build(spec)
    await ws.initialize()
    agent = agent_for(ws, pipes)
    try:
        async with agent.hold_session(
            session_id, AckingStore(ws, pipes), lease_ttl=LEASE_TTL, wait=wait
        ) as resumed:
            os.write(pipes.marks, b"L\n")
            if pipes.go >= 0:
                await asyncio.to_thread(os.read, pipes.go, 1)
            if not resumed:
                await agent.reply(Msg("user", TASK, "user"))
            elif agent.awaiting_reply:
                await agent.reply()
    except LeaseLostError as exc:
        print(f"lease lost: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        await ws.close()
    return 0


def _entry(spec: dict[str, Any], session_id: str, pipes: Pipes, wait: float) -> None:
    os._exit(asyncio.run(_work(spec, session_id, pipes, wait)))


def start(spec: dict[str, Any], session_id: str, pipes: Pipes, *, wait: float) -> Any:
    """Fork a worker on ``session_id``; returns the started ``multiprocessing.Process``."""
    proc = multiprocessing.get_context("fork").Process(
        target=_entry, args=(spec, session_id, pipes, wait), daemon=True
    )
    proc.start()
    return proc
