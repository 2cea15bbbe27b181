"""The conversation's state is written to the store only when a decision changed it: a
retried request (the same history sent again) costs the store no write."""

from __future__ import annotations

from pathlib import Path

from contextfold.workspace import SQLiteWorkspace

from .servers import ScriptedUpstream, message
from .test_transparent import Conversation, transparent_gateway


class CountingStore(SQLiteWorkspace):
    """A SQLite store that counts the states written."""

    writes = 0

    async def save_state(self, session_id: str, state_json: str) -> None:
        type(self).writes += 1
        await super().save_state(session_id, state_json)


def test_a_retry_writes_no_state_and_a_new_turn_does(
    upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    for _ in range(4):
        upstream.then_json(message("ok"))
    conversation = Conversation("Fix it.", headers={"x-contextfold-session": "w1"})
    conversation.step()
    store = CountingStore(tmp_path / "state.sqlite")
    with transparent_gateway(upstream, sessions=store) as url:
        conversation.send(url)
        first = CountingStore.writes
        conversation.send(url)  # the client retries the same request
        retried = CountingStore.writes
        conversation.step()
        conversation.send(url)
        turned = CountingStore.writes
    assert first == 1
    assert retried == first
    assert turned == first + 1
    sent = [r.body for r in upstream.received]
    assert sent[0] == sent[1]  # the retry is forwarded as the first was
