"""Redaction reaches the saved session state (issue 28, point 1): with
``ContextConfig(redact=redact_credentials)`` neither the agent's saved state nor a framework
folder's saved engine state holds a credential in clear text, on disk (LocalWorkspace's
``state.json``) or in SQLite's ``states`` table; the live request is not changed."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextfold.agent import Agent
from contextfold.context import ContextConfig, ContextEngine, redact_credentials
from contextfold.integrations import HistoryFolder
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel
from contextfold.workspace import LocalWorkspace, SQLiteWorkspace

SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
]
TEXT = "Deploy with these: " + " ".join(SECRETS) + " and postgres://app:hunter2pass@db/prod"


def stored_text(root: Path) -> str:
    """Everything the workspace wrote, as text (files, and SQLite databases' rows)."""
    parts = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data.startswith(b"SQLite format 3"):
            with sqlite3.connect(path) as db:
                for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                    try:
                        rows = db.execute(f'SELECT * FROM "{table}"').fetchall()
                    except sqlite3.OperationalError:  # a full-text table's own functions
                        continue
                    parts += [" ".join(map(str, row)) for row in rows]
        else:
            parts.append(data.decode("utf-8", "replace"))
    return "\n".join(parts)


@pytest.fixture(params=["local", "sqlite"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalWorkspace(tmp_path / "ws")
    (tmp_path / "ws").mkdir()
    return SQLiteWorkspace(tmp_path / "ws" / "ws.sqlite3")


async def test_the_agents_saved_state_holds_no_credential(workspace: Any, tmp_path: Path) -> None:
    await workspace.initialize()
    model = ScriptedModel(["Noted."])
    agent = Agent(
        name="a",
        system_prompt="Help.",
        model=model,
        offloader=workspace,
        context_config=ContextConfig(redact=redact_credentials),
        session_id="job",
    )
    await agent.reply(TEXT)
    await agent.save_session()
    text = stored_text(tmp_path / "ws")
    assert "Noted." in text  # the state was saved
    assert [s for s in [*SECRETS, "hunter2pass"] if s in text] == []
    # The model was sent the user's words as written.
    assert SECRETS[0] in str(model.requests[0].messages)
    # A resumed agent reads the state back (the credentials masked).
    again = Agent(name="a", system_prompt="Help.", model=ScriptedModel([]), offloader=workspace)
    assert await again.resume_session("job")
    assert "Noted." in str(again.state.context)


async def test_a_folders_saved_state_holds_no_credential(workspace: Any, tmp_path: Path) -> None:
    pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")
    from contextfold.integrations.langchain import LangChainCodec

    await workspace.initialize()
    model = ScriptedModel([], context_size=8000)
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=8000,
        config=ContextConfig(redact=redact_credentials, tool_result_limit=2000),
        offloader=workspace,
        session_id="thread-1",
    )
    codec = LangChainCodec()
    folder: HistoryFolder[Any] = HistoryFolder(engine, codec, rewrites_history=True)
    call = ToolCallBlock(id="c1", name="env", input={})
    history = [
        *codec.from_msg(Msg("user", TEXT, "user")),
        *codec.from_msg(Msg("assistant", [call], "assistant")),
        *codec.from_msg(Msg("tool", [ToolResultBlock(id="c1", name="env", output=TEXT)], "user")),
    ]
    folded = await folder.fold(history, "Help.")
    assert SECRETS[0] in str(folded.request)  # sent as written
    text = stored_text(tmp_path / "ws")
    assert "history_folder" in text  # the state was saved
    assert [s for s in [*SECRETS, "hunter2pass"] if s in text] == []
