"""Crash and resume: an agent process killed with SIGKILL mid-reply, many times.

Each round forks a process that resumes the session from the store (LocalWorkspace or
SQLiteWorkspace, the offloader and session store at once), replies to new messages,
saves the session and only then acks each message; the test kills it at a random moment.
After all rounds a new agent resumes the session: every acknowledged message is in its
history (the offload log plus the saved context) exactly once, in order, and the session
continues.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from contextfold.message import Msg

from . import rel_crash_child as child
from .rel_support import assert_provider_valid, record, rng, scaled

ROUNDS = 20


async def _resumed(spec: dict[str, str]) -> tuple[list[Msg], list[Msg], str]:
    ws = child.build(spec)
    await ws.initialize()
    try:
        agent = child.agent_for(ws)
        assert await agent.resume_session(child.SESSION)
        assert_provider_valid(agent)
        stored = await ws.load_context(child.SESSION, with_data=False)
        context = agent.context
        reply = await agent.reply("one more after the crashes")  # the session goes on
        await agent.save_session()
        return stored, context, reply.text
    finally:
        await ws.close()


def _wait_for_ack(acks: Path, proc: object, timeout: float = 60.0) -> None:
    """Until the child appends one more ack line (it must, well within ``timeout``)."""
    before = acks.read_bytes().count(b"\n") if acks.exists() else 0
    deadline = time.monotonic() + timeout
    while (acks.read_bytes().count(b"\n") if acks.exists() else 0) <= before:
        assert time.monotonic() < deadline, f"no ack within {timeout:.0f} s from {proc}"
        time.sleep(0.01)


def _drop_torn_tail(acks: Path) -> None:
    """Cut an ack the kill tore mid-write, so the next run's first ack starts a line.

    Linux may stop a ``write`` to a regular file at a page boundary when a fatal signal is
    pending, so even one ``os.write`` of a short line can land in part; a torn ack is not an
    ack, and left in place it would swallow the next run's first one.
    """
    if not acks.exists():
        return
    data = acks.read_bytes()
    if data and not data.endswith(b"\n"):
        with acks.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


@pytest.mark.parametrize("kind", ["local", "sqlite"])
def test_sigkilled_agent_resumes_with_every_acknowledged_message_once(
    kind: str, tmp_path: Path
) -> None:
    spec = {"kind": kind, "path": str(tmp_path / ("ws" if kind == "local" else "ws.db"))}
    acks = tmp_path / "acks.jsonl"
    random = rng(7)
    # Load the tokenizer once here; forked children inherit it instead of each paying for it.
    child.agent_for(child.build(spec)).model.token_counter.count_text("warm up")
    rounds = scaled(ROUNDS)
    for run in range(rounds):
        proc = child.start(spec, run, str(acks))
        if run % 2:
            # Half the rounds die at a random moment from the start (during the resume
            # too); the others only after their first ack, so every run acknowledges
            # something however slow the machine is.
            _wait_for_ack(acks, proc)
        time.sleep(random.uniform(0.1, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL, "the child died before it was killed"
        _drop_torn_tail(acks)

    acked = [json.loads(line) for line in acks.read_text().splitlines()]
    assert len(acked) >= rounds // 2, "too few acknowledged messages to mean anything"

    stored, context, reply = asyncio.run(_resumed(spec))
    assert reply.startswith("crash answer")
    # The context is whole and once; an offload repeated after a crash repeats the same
    # message (same id, same content), which the read-back view shows once.
    assert len({m.id for m in context}) == len(context)
    by_id: dict[str, str] = {}
    for m in stored:
        assert by_id.setdefault(m.id, m.model_dump_json()) == m.model_dump_json()
    history_ids = [
        i for i in dict.fromkeys(m.id for m in stored) if i not in {m.id for m in context}
    ]
    history_ids += [m.id for m in context]
    history = {m.id: m for m in [*stored, *context]}
    position = {mid: n for n, mid in enumerate(history_ids)}
    for ack in acked:
        assert ack["user"] in position, f"acknowledged message {ack['text']} was lost"
        assert ack["reply"] in position, f"the reply to {ack['text']} was lost"
    order = [position[a["user"]] for a in acked]
    assert order == sorted(order), "acknowledged messages are out of order"
    user_texts = Counter(
        history[i].text.split()[0]
        for i in history_ids
        if history[i].role == "user" and history[i].name == "user"
    )
    for ack in acked:
        assert user_texts[ack["text"]] == 1, (
            f"{ack['text']} is in the history {user_texts[ack['text']]} times"
        )
    repeats = len(stored) - len(by_id)
    print(f"\n[crash {kind}] rounds={rounds} acked={len(acked)} history={len(history_ids)} "
          f"offloaded={len(stored)} repeated-offloads={repeats}")  # fmt: skip
    record("crash and resume", f"SIGKILL rounds [{kind}]", rounds)
    record("crash and resume", f"acknowledged messages checked [{kind}]", len(acked))
