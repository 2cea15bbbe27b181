"""The contract's ``SessionStore`` groups: saved state per session, and its purge."""

from __future__ import annotations

import json

from .._exceptions import ContextfoldError
from ..workspace import SessionStore
from ._contract_base import Fixtures, ReaderStore, asyncio_tests

__all__ = ["ReaderStoreTests", "SessionStoreTests"]


@asyncio_tests
class SessionStoreTests(Fixtures):
    """``SessionStore``: the agent's saved state per session."""

    async def test_state_saves_and_loads(self, store: SessionStore) -> None:
        await store.save_state("s1", '{"summary": "v1"}')
        await store.save_state("s1", '{"summary": "v2"}')
        assert json.loads(await store.load_state("s1") or "") == {"summary": "v2"}

    async def test_missing_state_is_none(self, store: SessionStore) -> None:
        assert await store.load_state("never") is None

    async def test_sessions_keep_separate_states(self, store: SessionStore) -> None:
        await store.save_state("s1", '{"n": 1}')
        await store.save_state("s2", '{"n": 2}')
        assert (await store.load_state("s1"), await store.load_state("s2")) == (
            '{"n": 1}',
            '{"n": 2}',
        )

    async def test_large_unicode_state_round_trips_exactly(self, store: SessionStore) -> None:
        state = '{"text": "' + "é🙂\\n" * 50_000 + '"}'
        await store.save_state("s1", state)
        assert await store.load_state("s1") == state

    async def test_hostile_session_ids_keep_their_state_or_raise_a_contextfold_error(
        self, store: SessionStore
    ) -> None:
        # "\udc80": a lone surrogate (os.fsdecode of a non-UTF-8 name, JSON's "\\udc80"),
        # which a UTF-8 text column cannot hold: accept it or raise ContextfoldError.
        for session_id in ("../x", "/abs", "a\x00b", "x" * 1000, "sessions/s1", "\udc80"):
            try:
                await store.save_state(session_id, f'{{"id": {len(session_id)}}}')
            except ContextfoldError:
                continue
            assert await store.load_state(session_id) == f'{{"id": {len(session_id)}}}'
        assert await store.load_state("x") is None  # "../x" must not land on "x"


@asyncio_tests
class ReaderStoreTests(Fixtures):
    """A reader that is also a ``SessionStore``: purge covers the state."""

    async def test_purge_removes_the_session_state(self, reader_store: ReaderStore) -> None:
        await reader_store.save_state("s1", "{}")
        await reader_store.save_state("s2", "{}")
        await reader_store.purge("s1")
        assert await reader_store.load_state("s1") is None
        assert await reader_store.load_state("s2") == "{}"
        assert "s1" not in await reader_store.list_sessions()
