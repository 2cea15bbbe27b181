"""The process the crash test kills: an agent that replies, saves its session, acks.

Started with ``fork``. Each message is acknowledged (one JSON line appended to the ack
file with ``O_APPEND``) only after ``save_session`` returned, so an ack is a promise that
the message survives.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
from typing import Any

from contextfold.context import ContextConfig
from contextfold.message import Msg
from contextfold.tool import Toolkit
from contextfold.workspace import BaseWorkspace, LocalWorkspace, SQLiteWorkspace

from .rel_support import filler, make_agent, scripted, smart_script

SESSION = "crash-session"


def build(spec: dict[str, Any]) -> BaseWorkspace:
    if spec["kind"] == "local":
        return LocalWorkspace(spec["path"])
    return SQLiteWorkspace(spec["path"])


def toolkit() -> Toolkit:
    kit = Toolkit()

    @kit.register
    def dump(n: int) -> str:
        """A long log (truncated and offloaded).

        Args:
            n: Seed.
        """
        return "\n".join(f"log {n} line {i}" for i in range(300))

    return kit


def agent_for(ws: BaseWorkspace) -> Any:
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, tool_result_limit=150)
    model = scripted(smart_script("crash", tool="dump", every=3))
    return make_agent(model, offloader=ws, config=config, toolkit=toolkit(), session_id=SESSION)


async def _work(spec: dict[str, Any], run: int, ack_path: str) -> None:
    ws = build(spec)
    await ws.initialize()
    agent = agent_for(ws)
    await agent.resume_session(SESSION)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rnd = random.Random(run)
    i = 0
    while True:
        msg = Msg("user", f"run{run}-msg{i} " + filler(i, rnd.randint(5, 120)), "user")
        reply = await agent.reply(msg)
        await agent.save_session()
        os.write(fd, (json.dumps({"user": msg.id, "text": msg.text.split()[0],
                                  "reply": reply.id}) + "\n").encode())  # fmt: skip
        i += 1


def _entry(spec: dict[str, Any], run: int, ack_path: str) -> None:
    asyncio.run(_work(spec, run, ack_path))


def start(spec: dict[str, Any], run: int, ack_path: str) -> Any:
    proc = multiprocessing.get_context("fork").Process(
        target=_entry, args=(spec, run, ack_path), daemon=True
    )
    proc.start()
    return proc
