"""What the session-isolation tests of the three integrations share: the workspaces (each
reopened as a new process would), the two threads' distinctive logs, the read-back calls
thread B makes, and what must hold of their answers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from contextfold.context import ContextConfig
from contextfold.token import counter_for_model
from contextfold.workspace import (
    BaseWorkspace,
    LocalWorkspace,
    MemoryWorkspace,
    PostgresWorkspace,
    SQLiteWorkspace,
)

from .scripted import SECRETS

BACKENDS = ["memory", "local", "sqlite", "postgres"]

Opener = Callable[[], Awaitable[BaseWorkspace]]


def options(workspace: BaseWorkspace) -> dict[str, Any]:
    """The engine's parts: a window no compaction needs, a result limit every log is over."""
    return {
        "counter": counter_for_model("gpt-4o"),
        "context_size": 30_000,
        "offloader": workspace,
        "config": ContextConfig(tool_result_limit=120),
    }


def readback_calls(other_ref: str) -> list[tuple[str, dict[str, Any]]]:
    """Thread B reaches for thread A's items with every tool, and for its own with Grep."""
    return [
        ("Grep", {"pattern": SECRETS["thread-a"]}),
        ("Read", {"path": other_ref}),
        ("Glob", {"pattern": "**"}),
        ("Search", {"query": SECRETS["thread-a"]}),
        ("Grep", {"pattern": SECRETS["thread-b"]}),
    ]


async def first_ref(workspace: BaseWorkspace, session: str) -> str:
    """The reference of the session's first offloaded tool result."""
    items = [i for i in await workspace.list_items(session) if i.kind == "tool_result"]
    assert items, f"nothing of {session} was offloaded"
    return items[0].ref


def _relative(ref: str) -> str:
    """``ref`` from its ``sessions/`` part on (LocalWorkspace lists absolute paths)."""
    at = ref.find("sessions/")
    return ref[at:] if at >= 0 else ref


async def check_isolated(
    workspace: BaseWorkspace, answers: list[str], *, own: str, other: str
) -> None:
    """``answers`` (of :func:`readback_calls`, in order) show none of ``other``'s items
    and, as a control, ``own``'s."""
    assert len(answers) == 5, answers
    grep_other, read_other, glob, search, grep_own = answers
    leaked = [a for a in answers if f"failure {SECRETS[other]}" in a]  # the log, not a query
    assert not leaked, f"thread {own} read {other}'s data: {leaked}"
    assert grep_other == "No matches."
    assert read_other.startswith("Error:"), read_other
    assert "not an offloaded item of this session" in read_other
    # Glob prints workspace-relative references (``sessions/...``), which Read accepts.
    other_refs = [_relative(i.ref) for i in await workspace.list_items(other)]
    own_refs = [_relative(i.ref) for i in await workspace.list_items(own)]
    assert not any(ref in glob for ref in other_refs), glob
    assert any(ref in glob for ref in own_refs), glob
    assert search.startswith("No offloaded items match"), search
    assert f"failure {SECRETS[own]}" in grep_own, grep_own


@pytest.fixture(params=BACKENDS)
async def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the same workspace again at each call (the memory one is one object)."""
    kind: str = request.param
    opened: list[BaseWorkspace] = []
    memory = MemoryWorkspace()
    dsn = ""
    prefix = ""
    if kind == "postgres":
        pytest.importorskip("asyncpg", reason="PostgreSQL needs contextfold[postgres]")
        dsn = os.environ.get("CONTEXTFOLD_TEST_PG_DSN", "")
        if not dsn:
            dsn = request.getfixturevalue("pg_dsn")
        prefix = request.getfixturevalue("pg_prefix")

    async def open_() -> BaseWorkspace:
        workspace: BaseWorkspace
        if kind == "memory":
            workspace = memory
        elif kind == "local":
            workspace = LocalWorkspace(tmp_path / "ws")
        elif kind == "sqlite":
            workspace = SQLiteWorkspace(tmp_path / "ws.db")
        else:
            workspace = PostgresWorkspace(dsn, table_prefix=prefix, max_connections=2)
        await workspace.initialize()
        opened.append(workspace)
        return workspace

    yield open_
    for workspace in opened:
        await workspace.close()
