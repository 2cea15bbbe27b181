"""The SQLite FTS5 index keeps no term string, stays exact through every delete, and is
built afresh when it was written by another version (whose terms may differ)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import (
    LocalWorkspace,
    MemoryWorkspace,
    SearchableWorkspace,
    SQLiteWorkspace,
    _fts,
)
from contextfold.workspace._names import CONTEXT_FILE
from contextfold.workspace._search import Doc, RawHit, context_docs, tool_doc
from contextfold.workspace._terms import index_terms, query_terms

from ._searchable import open_searchable

TEXT = "getUserName parse_args src/parser/lexer.py"
LONG = "needle " + "filler words " * 2_000  # longer than the text kept for its snippet


@pytest.fixture(params=["memory", "sqlite", "local"])
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> SearchableWorkspace:
    return await open_searchable(request.param, tmp_path, request)


@contextlib.contextmanager
def _index(ws: SearchableWorkspace) -> Iterator[sqlite3.Connection]:
    """A connection to ``ws``'s index, able to recompute its documents' terms."""
    if isinstance(ws, MemoryWorkspace):
        assert ws._index is not None
        yield ws._index
        return
    with contextlib.closing(sqlite3.connect(_index_path(ws))) as c:
        _fts.register(c)
        yield c


def _index_path(ws: SearchableWorkspace) -> str:
    if isinstance(ws, SQLiteWorkspace):
        return ws._path
    assert isinstance(ws, LocalWorkspace)
    return str(ws.workdir / "search.sqlite3")


def _check(c: sqlite3.Connection) -> None:
    """FTS5's own check that the index holds exactly the terms of its documents."""
    c.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")


def _stored_bytes(ws: SearchableWorkspace) -> bytes:
    if isinstance(ws, MemoryWorkspace):
        assert ws._index is not None
        return ws._index.serialize()
    path = Path(_index_path(ws))
    return b"".join(f.read_bytes() for f in path.parent.glob(f"{path.name}*"))  # and its WAL


async def test_the_index_keeps_the_text_but_not_the_term_string(
    ws: SearchableWorkspace,
) -> None:
    await ws.offload_context("s1", [Msg("user", TEXT, "user")])
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output=f"out {TEXT}"))
    [hit, _] = await ws.search("lexer")
    assert hit.snippet == "getUserName parse_args src/parser/**lexer**.py"
    stored = _stored_bytes(ws)
    assert TEXT.encode() in stored
    assert " ".join(index_terms(TEXT)).encode() not in stored
    await ws.close()


def _text_of(i: int) -> str:
    """A message like an agent's: code, paths, a traceback line, numbers."""
    return (
        f"Running tests/test_parser_{i}.py::test_parse_args_{i % 17}\n"
        f"def get_user_name_{i}(self, userId: int) -> str:\n"
        f"    return self.repo.lookup(userId, cache=True)  # src/app/models_{i % 7}.py:{i}\n"
        f"AssertionError: expected {i * 37} but got {i * 41} in ParseResult.value\n"
    ) * 4


async def test_the_index_is_at_most_twice_the_text_it_holds(
    ws: SearchableWorkspace,
) -> None:
    texts = [_text_of(i) for i in range(600)]
    for start in range(0, len(texts), 20):
        await ws.offload_context("s1", [Msg("user", t, "user") for t in texts[start : start + 20]])
    with _index(ws) as c:
        pages = c.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'search%' "
            "OR name LIKE 'sqlite_autoindex_search%'"
        ).fetchone()[0]
    # The text once, and an inverted index smaller than it (4.7x with the term string).
    assert pages / sum(len(t.encode()) for t in texts) < 2
    await ws.close()


async def test_the_index_stays_exact_through_adds_drops_and_purges(
    ws: SearchableWorkspace,
) -> None:
    await ws.offload_context("s1", [Msg("user", TEXT, "user"), Msg("user", LONG, "user")])
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output=LONG))
    await ws.offload_context("s2", [Msg("user", f"{TEXT} again", "user")])
    await ws.offload_tool_result("s2", ToolResultBlock(id="c2", name="t", output="kept"))
    with _index(ws) as c:
        _check(c)
    await ws.purge("s1")
    assert [h.session_id for h in await ws.search("getUserName needle")] == ["s2"]
    await ws.offload_context("s1", [Msg("user", "needle anew", "user")])
    with _index(ws) as c:
        _check(c)
        assert c.execute("SELECT COUNT(*) FROM search_docs").fetchone() == (3,)
    assert [(h.session_id, h.snippet) for h in await ws.search("needle")] == [
        ("s1", "**needle** anew")
    ]
    await ws.close()


async def test_a_session_removed_behind_a_local_workspace_leaves_its_index_exact(
    tmp_path: Path,
) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", TEXT, "user"), Msg("user", LONG, "user")])
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output=LONG))
    await ws.offload_context("s2", [Msg("user", "other words", "user")])
    await ws.close()
    shutil.rmtree(tmp_path / "ws" / "sessions" / "s1")  # what the index drops is gone
    again = LocalWorkspace(tmp_path / "ws", fsync=False)
    await again.initialize()
    assert await again.search("needle getUserName") == []
    with _index(again) as c:
        _check(c)
        assert c.execute("SELECT skey FROM search_docs").fetchall() == [("s2",)]
    await again.close()


# -- an index written by another version ---------------------------------------------------

MAIN_SCHEMA = """
CREATE VIRTUAL TABLE search_fts USING fts5(
    terms, skey UNINDEXED, name UNINDEXED, line UNINDEXED, text UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 0');
CREATE TABLE search_sources (
    skey TEXT NOT NULL, name TEXT NOT NULL, upto INTEGER NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (skey, name));
CREATE VIRTUAL TABLE search_vocab USING fts5vocab(search_fts, 'row');
"""
"""The index as the releases before this layout wrote it (term string in the content)."""


async def _fill(ws: SearchableWorkspace) -> None:
    await ws.offload_context("s1", [Msg("user", f"alpha line{i}", "user") for i in range(3)])
    await ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="gamma result"))


TOOL = "tool_result-c1.txt"


async def _found(ws: SearchableWorkspace) -> list[tuple[str, int] | None]:
    """Where the best hit for each word is."""
    out: list[tuple[str, int] | None] = []
    for word in ("line2", "gamma", "ghost"):
        hits = await ws.search(word)
        out.append((hits[0].path, hits[0].offset) if hits else None)
    return out


FOUND = [("sessions/s1/context.jsonl", 2), (f"sessions/s1/{TOOL}", 0), None]


def _as_written_by_main(c: sqlite3.Connection, sources: list[tuple[str, str, int, int]]) -> None:
    """Replace the index with one in main's layout that claims ``sources`` indexed and
    holds a document the store lacks: a catch-up alone would keep it."""
    c.execute("DROP VIEW IF EXISTS search_terms")
    for table in ("search_vocab", "search_fts", "search_docs", "search_sources", "search_meta"):
        c.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in MAIN_SCHEMA.split(";"):
        if statement.strip():
            c.execute(statement)
    c.execute(
        "INSERT INTO search_fts (terms, skey, name, line, text) VALUES (?, ?, ?, ?, ?)",
        ("ghost", "s1", CONTEXT_FILE, 7, "ghost"),
    )
    c.executemany("INSERT INTO search_sources VALUES (?, ?, ?, ?)", sources)
    c.commit()


def _claimed(ws: SearchableWorkspace) -> list[tuple[str, str, int, int]]:
    """``search_sources`` rows that say all ``_fill`` stored is indexed, as ``ws`` counts."""
    if isinstance(ws, SQLiteWorkspace):
        with contextlib.closing(sqlite3.connect(ws._path)) as c:
            [(chunk,)] = c.execute("SELECT MAX(id) FROM context_chunks").fetchall()
        return [("s1", CONTEXT_FILE, chunk, 3), ("s1", TOOL, 1, 1)]
    assert isinstance(ws, LocalWorkspace)
    s1 = ws.workdir / "sessions" / "s1"
    return [
        ("s1", CONTEXT_FILE, (s1 / CONTEXT_FILE).stat().st_size, 3),
        ("s1", TOOL, (s1 / TOOL).stat().st_size, 1),
    ]


def _in_main_layout(ws: SearchableWorkspace, c: sqlite3.Connection) -> None:
    _as_written_by_main(c, _claimed(ws))


def _stamped_otherwise(ws: SearchableWorkspace, c: sqlite3.Connection) -> None:
    _fts.add_docs(c, "s1", CONTEXT_FILE, context_docs(b"ghost\n", 7))
    c.execute("UPDATE search_meta SET stamp = 'terms of another version'")
    c.commit()


@pytest.mark.parametrize("written", [_in_main_layout, _stamped_otherwise])
@pytest.mark.parametrize("kind", ["sqlite", "local"])
async def test_an_index_written_by_another_version_is_built_afresh(
    kind: str,
    written: Callable[[SearchableWorkspace, sqlite3.Connection], None],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    ws = await open_searchable(kind, tmp_path, request)
    await _fill(ws)
    with _index(ws) as c:
        written(ws, c)
    await ws.close()
    await ws.initialize()
    assert await _found(ws) == FOUND
    with _index(ws) as c:
        _check(c)
        assert c.execute("SELECT stamp FROM search_meta").fetchall() == [(_fts.STAMP,)]
    await ws.close()


# -- deletes against a fresh index ---------------------------------------------------------

_WORDS = ["alpha", "beta", "gamma", "parse_args", "getUserName", "src/app.py", "the", "x9"]


def _long(text: str) -> str:
    """``text`` repeated past the characters kept of a message for its snippet."""
    return f"{text} filler " * (20_001 // (len(text) + 8) + 1)


_text = st.lists(st.sampled_from(_WORDS), max_size=10).map(" ".join)
_skey = st.sampled_from(["s1", "s2"])
_tool = st.sampled_from(["tool_result-a.txt", "tool_result-b.txt"])
Op = tuple[str, str, str, list[str]]
"""``(kind, session key, item name, texts)``."""
_op: st.SearchStrategy[Op] = st.one_of(
    st.tuples(
        st.just("add"),
        _skey,
        st.just(CONTEXT_FILE),
        st.lists(st.one_of(_text, _text.map(_long)), min_size=1, max_size=3),
    ),
    st.tuples(
        st.just("add"),
        _skey,
        _tool,
        st.lists(st.one_of(_text, _text.map(_long)), min_size=1, max_size=1),
    ),
    st.tuples(st.just("drop"), _skey, st.one_of(st.just(CONTEXT_FILE), _tool), st.just([])),
    st.tuples(st.just("purge"), _skey, st.just(""), st.just([])),
)


def _memory_index() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    _fts.install(c)
    return c


class _Model:
    """Documents in the order they were indexed, recorded as a backend records them."""

    def __init__(self) -> None:
        self.docs: list[tuple[str, str, Doc]] = []

    def _count(self, skey: str, name: str) -> int:
        return sum(1 for k, n, _ in self.docs if (k, n) == (skey, name))

    def apply(self, c: sqlite3.Connection, op: Op) -> None:
        kind, skey, name, texts = op
        if kind == "add" and name == CONTEXT_FILE:
            payload = "".join(f"{t}\n" for t in texts).encode()
            self._add(c, skey, name, context_docs(payload, self._count(skey, name)))
        elif kind == "add" and not self._count(skey, name):  # a tool result is stored once
            self._add(c, skey, name, [tool_doc(texts[0].encode())])
        elif kind == "drop":
            _fts.drop_item(c, skey, name)
            self.docs = [d for d in self.docs if d[:2] != (skey, name)]
        elif kind == "purge":
            _fts.drop_session(c, skey)
            self.docs = [d for d in self.docs if d[0] != skey]

    def _add(self, c: sqlite3.Connection, skey: str, name: str, docs: list[Doc]) -> None:
        _fts.add_docs(c, skey, name, docs)
        self.docs.extend((skey, name, d) for d in docs)
        _fts.set_source(c, skey, name, 0, self._count(skey, name))

    def fresh(self) -> sqlite3.Connection:
        """An index of the remaining documents alone, added in the same order."""
        c = _memory_index()
        for skey, name, doc in self.docs:
            _fts.add_docs(c, skey, name, [doc])
            _fts.set_source(c, skey, name, 0, self._count(skey, name))
        return c


def _results(c: sqlite3.Connection) -> list[list[RawHit]]:
    queries = [query_terms(w) for w in _WORDS if w != "the"] + [query_terms("alpha getUserName")]
    return [
        _fts.fts_query(c, terms, skey, 5, float("inf"))
        for terms in queries
        for skey in (None, "s1", "s2")
    ]


@pytest.mark.parametrize("prune_from", [1, 10**9], ids=["pruned", "unpruned"])
@settings(max_examples=60, deadline=None)
@given(ops=st.lists(_op, max_size=14))
def test_after_adds_and_drops_the_index_answers_as_a_fresh_one(
    prune_from: int, ops: list[Op]
) -> None:
    model = _Model()
    c = _memory_index()
    for op in ops:
        model.apply(c, op)
    _check(c)
    with mock.patch.object(_fts, "_PRUNE_FROM", prune_from):
        assert _results(c) == _results(model.fresh())
