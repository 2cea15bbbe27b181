"""Search figure: recall of facts lost to compaction, query latency, index cost (issue 14).

**Workspace.** The 44 SWE-bench runs are replayed through the engine into one workspace
per backend (``replay_runs(..., context_size=16000)``, default extractive summarizer), so
what the engine compressed is offloaded exactly as in use: every compressed message is a
line of its session's context log, every truncated tool result an item of its own.

**Probes** (fixed rules, applied to the memory backend's items; the replay is
deterministic, so every backend holds the same items):

1. An *item* is one offloaded message (a context-log line: target ``(path, line)``) or one
   tool result (target ``path``). Its text is the message's text, tool-call arguments and
   tool-result text, split into lines; blank lines are dropped.
2. A *fact* is the first match on a line, tried in this order: an exception or error name
   (``\\w*(Error|Exception|Warning)``), a file path (a word with a ``/`` or ending in
   ``.py``/``.txt``/...), a function name (``name(`` with ``_`` or camelCase inside), a
   number of 3 or more digits.
3. The *query* is made of the words (``[A-Za-z][A-Za-z0-9_]{2,}``) of the line before and
   the line after the fact's line, without stopwords, without any word that shares a
   search term with the fact, case-insensitively distinct: the 6 longest (first occurrence
   breaks ties). Fewer than 3 such words: no probe on that line.
4. At most one probe per item (its first line that gives one), items in path and line
   order; a query already used is skipped.
5. A probe is *recalled* when one of the first 5 hits is its target, or an item that holds
   the same passage (the fact's line with the lines before and after it, verbatim): a
   listing or log that two runs printed alike gives the agent the fact just as well.
   *Strict* recall counts the target item only.

**Latency** is measured on a synthetic session of 10,000 messages (``synthetic_session``,
offloaded as 500 compressions of 20 messages into one session, then probed with the same
rules); **write overhead** is the median time of those 500 ``offload_context`` calls minus
the same on a workspace whose indexing is switched off for the measurement (documents
replaced by none; the bookkeeping rows remain); **index size** is what the index tables
hold (``dbstat`` for SQLite, ``pg_total_relation_size`` for PostgreSQL). PostgreSQL's
tables are ``ANALYZE``d before the queries, as autovacuum would do a minute after such a
load (its lexeme frequencies leave very common words out of a query).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.replay import load_recordings, replay_runs
from contextfold.workspace import (
    LocalWorkspace,
    MemoryWorkspace,
    PostgresWorkspace,
    S3Workspace,
    SearchableWorkspace,
    SQLiteWorkspace,
)

from ._common import Options, fmt_ms
from ._data import SWEBENCH_DIR, synthetic_session

__all__ = ["Probe", "build_probes", "item_lines", "run"]

_FACTS = [
    ("error", re.compile(r"\b\w*(?:Error|Exception|Warning)\b")),
    (
        "path",
        re.compile(r"[\w.\-]*(?:/[\w.\-]+)+|\b[\w\-]+\.(?:py|txt|cfg|toml|rst|json|ya?ml|ini)\b"),
    ),
    ("function", re.compile(r"\b([a-z]+_[a-z_0-9]+|[a-z]+[A-Z]\w*)\(")),
    ("number", re.compile(r"\b\d{3,}\b")),
]
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "the and for with that this from are was were not but you your have has had its into "
        "then than there their what when where which while will would should could can may "
        "also just like some such only more most other each any all out use used using one "
        "two new get set see let now how why who our about after before over under again",
    )
)
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@dataclass(frozen=True)
class Probe:
    """A query made of a fact's surroundings, and the item that holds the fact."""

    query: str
    fact: str
    kind: str
    path: str
    line: int
    passage: str
    """The fact's line with its neighbours, as they appear in the item."""


def _parts(word: str) -> set[str]:
    """The lower-case pieces a word is searched by (whole, and split at ``_ . /`` and case)."""
    pieces = {word.lower()}
    for chunk in re.split(r"[^A-Za-z0-9]+", word):
        pieces.add(chunk.lower())
        pieces.update(p.lower() for p in _PARTS.findall(chunk))
    return {p for p in pieces if len(p) >= 2}


def _fact(line: str) -> tuple[str, str] | None:
    for kind, pattern in _FACTS:
        m = pattern.search(line)
        if m:
            return kind, m.group(1) if pattern.groups else m.group()
    return None


def _query(fact: str, around: list[str]) -> str | None:
    banned = _parts(fact)
    seen: dict[str, str] = {}
    for line in around:
        for word in _WORD.findall(line):
            low = word.lower()
            if low in _STOP or low in seen or _parts(word) & banned:
                continue
            seen[low] = word
    words = sorted(seen.values(), key=len, reverse=True)[:6]
    return " ".join(words) if len(words) >= 3 else None


def msg_text(msg: Msg) -> str:
    """The text of an offloaded message the way a reader sees it."""
    parts = [msg.text]
    parts += [json.dumps(c.input) for c in msg.tool_calls]
    parts += [r.text() for r in msg.tool_results]
    return "\n".join(p for p in parts if p)


async def item_lines(ws: SearchableWorkspace) -> list[tuple[str, int, str, str]]:
    """``(path, line, kind, text)`` of every message and tool result in ``ws``."""
    out: list[tuple[str, int, str, str]] = []
    for item in await ws.list_items():
        if item.kind == "context":
            for n, line in enumerate((await ws.read(item.ref)).split("\n")):
                if line:
                    out.append((item.path, n, "context", msg_text(Msg.from_json(line))))
        elif item.kind == "tool_result":
            out.append((item.path, 0, "tool_result", await ws.read(item.ref)))
    return out


def build_probes(items: list[tuple[str, int, str, str]]) -> list[Probe]:
    """The probes of the module docstring's rules."""
    probes: list[Probe] = []
    used: set[str] = set()
    for path, line_no, _kind, text in items:
        lines = [x for x in text.split("\n") if x.strip()]
        for i, line in enumerate(lines):
            found = _fact(line)
            if found is None:
                continue
            around = lines[max(0, i - 1) : i] + lines[i + 1 : i + 2]
            query = _query(found[1], around)
            if query is None or query in used:
                continue
            used.add(query)
            passage = "\n".join(lines[max(0, i - 1) : i + 2])
            probes.append(Probe(query, found[1], found[0], path, line_no, passage))
            break
    return probes


# -- the workspaces ------------------------------------------------------------------------


def _pg_dsn() -> str | None:
    return os.environ.get("BENCH_PG_DSN") or os.environ.get("CONTEXTFOLD_TEST_PG_DSN")


async def _new(backend: str, root: Path) -> SearchableWorkspace:
    ws: SearchableWorkspace
    if backend == "memory":
        ws = MemoryWorkspace()
    elif backend == "sqlite":
        ws = SQLiteWorkspace(f"{root}.sqlite3", fsync=False)
    elif backend == "local":
        ws = LocalWorkspace(root, fsync=False)
    elif backend == "s3":
        assert _S3_ENDPOINT
        ws = S3Workspace(_S3_BUCKET, prefix=uuid.uuid4().hex[:10], endpoint_url=_S3_ENDPOINT[0])
    else:
        dsn = _pg_dsn()
        assert dsn is not None
        ws = PostgresWorkspace(dsn, table_prefix=f"b{uuid.uuid4().hex[:10]}_")
    await ws.initialize()
    return ws


_S3_BUCKET = "bench-search"
_S3_ENDPOINT: list[str] = []
"""The loopback S3-protocol server of this run (moto's server mode), once started."""


def _s3_available() -> bool:
    try:
        import aiobotocore  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.asynccontextmanager
async def _s3_server() -> AsyncIterator[None]:
    """moto's S3 server on loopback for the ``s3`` backend (the tests' server, one request
    at a time, as its conditional writes need), with test credentials."""
    from tests.s3_server import CREDENTIALS, create_bucket, s3_server

    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        with s3_server() as endpoint:
            await create_bucket(endpoint, _S3_BUCKET)
            _S3_ENDPOINT[:] = [endpoint]
            yield
    finally:
        _S3_ENDPOINT.clear()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def _drop(ws: SearchableWorkspace) -> None:
    if isinstance(ws, PostgresWorkspace):
        p = ws._p
        tables = [
            "sessions",
            "context_chunks",
            "tool_results",
            "data",
            "session_data",
            "states",
            "search_docs",
            "search_sources",
        ]
        pool = ws._pool_or_fail()
        await pool.execute("DROP TABLE " + ", ".join(f"{p}{t}" for t in tables))
    await ws.close()


@contextlib.contextmanager
def _index_off() -> Iterator[None]:
    """Indexing switched off (documents replaced by none), to time the offload alone."""
    from contextfold.workspace import _memory, _postgres_search, _side_index, _sqlite

    saved = []
    for mod in (_memory, _postgres_search, _side_index, _sqlite):
        for name, empty in (("context_docs", lambda *_: []), ("tool_doc", None)):
            if hasattr(mod, name):
                saved.append((mod, name, getattr(mod, name)))
                if empty is not None:
                    setattr(mod, name, empty)
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


async def _analyzed(ws: SearchableWorkspace) -> None:
    """PostgreSQL: the statistics autovacuum would gather a minute after such a load (the
    lexeme frequencies that leave very common words out of queries)."""
    if isinstance(ws, PostgresWorkspace):
        await ws._pool_or_fail().execute(f"ANALYZE {ws._p}search_docs")


async def _index_bytes(ws: SearchableWorkspace) -> int:
    def dbstat(path: str) -> int:
        with contextlib.closing(sqlite3.connect(path)) as c:
            row = c.execute(
                "SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'search%' "
                "OR name LIKE 'sqlite_autoindex_search%'"
            ).fetchone()
            return int(row[0] or 0)

    if isinstance(ws, SQLiteWorkspace):
        return dbstat(ws._path)
    if isinstance(ws, LocalWorkspace):
        return dbstat(str(ws.workdir / "search.sqlite3"))
    if isinstance(ws, PostgresWorkspace):
        p = ws._p
        got = await ws._pool_or_fail().fetchval(
            f"SELECT pg_total_relation_size('{p}search_docs') "
            f"+ pg_total_relation_size('{p}search_sources')"
        )
        return int(got)
    if isinstance(ws, S3Workspace):
        side = ws._search_index.side
        assert side is not None
        return dbstat(side.path)
    index = ws._index if isinstance(ws, MemoryWorkspace) else None
    if index is None:
        return 0
    pages = index.execute("PRAGMA page_count").fetchone()[0]
    return int(pages) * int(index.execute("PRAGMA page_size").fetchone()[0])


# -- measuring -----------------------------------------------------------------------------


def _lines_of(text: str) -> str:
    return "\n".join(x for x in text.split("\n") if x.strip())


def _recalled(
    hits: list[Any], probe: Probe, texts: dict[tuple[str, int], str], *, strict: bool
) -> bool:
    for hit in hits:
        where = (hit.path, hit.offset if hit.kind == "context" else 0)
        if where == (probe.path, probe.line):
            return True
        if not strict and probe.passage in texts.get(where, ""):
            return True
    return False


@dataclass
class _Recall:
    at: dict[int, float]
    strict5: float
    by_kind: dict[str, float]
    times: list[float]


async def _recall(
    ws: SearchableWorkspace, probes: list[Probe], items: list[tuple[str, int, str, str]]
) -> _Recall:
    texts = {(path, line): _lines_of(text) for path, line, _, text in items}
    found = {1: 0, 5: 0, 10: 0}
    strict = 0
    by_kind: dict[str, list[bool]] = {}
    times: list[float] = []
    for probe in probes:
        t0 = time.perf_counter()
        hits = await ws.search(probe.query, limit=10)
        times.append(time.perf_counter() - t0)
        for k in found:
            found[k] += _recalled(hits[:k], probe, texts, strict=False)
        strict += _recalled(hits[:5], probe, texts, strict=True)
        by_kind.setdefault(probe.kind, []).append(_recalled(hits[:5], probe, texts, strict=False))
    n = max(1, len(probes))
    return _Recall(
        {k: v / n for k, v in found.items()},
        strict / n,
        {k: sum(v) / len(v) for k, v in by_kind.items()},
        times,
    )


def _synthetic_msgs(n: int) -> list[Msg]:
    session = synthetic_session(n)
    msgs: list[Msg] = [Msg("user", session.task, "user")]
    for k, step in enumerate(session.steps):
        call = ToolCallBlock(id=f"call_{k}", name="bash", input={"command": step.command})
        msgs.append(Msg("agent", [TextBlock(text=step.thought), call], "assistant"))
        result = ToolResultBlock(id=f"call_{k}", name="bash", output=step.output)
        msgs.append(Msg("user", [result], "user"))
    return msgs[:n]


async def _offload_times(ws: SearchableWorkspace, msgs: list[Msg]) -> list[float]:
    times = []
    for i in range(0, len(msgs), 20):
        t0 = time.perf_counter()
        await ws.offload_context("long", msgs[i : i + 20])
        times.append(time.perf_counter() - t0)
    return times


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _backend_row(
    backend: str, tmp: Path, runs: list[Any], probes: list[Probe], items: list[Any], n_long: int
) -> str:
    replayed = await _new(backend, tmp / f"{backend}-runs")
    try:
        await replay_runs(runs, context_size=16000, workspace=replayed)
        await _analyzed(replayed)
        runs_recall = await _recall(replayed, probes, items)
    finally:
        await _drop(replayed)
    msgs = _synthetic_msgs(n_long)
    with _index_off():
        bare = await _new(backend, tmp / f"{backend}-bare")
        try:
            bare_times = await _offload_times(bare, msgs)
        finally:
            await _drop(bare)
    long = await _new(backend, tmp / f"{backend}-long")
    try:
        with_times = await _offload_times(long, msgs)
        await _analyzed(long)
        size = await _index_bytes(long)
        stored = sum(i.size for i in await long.list_items())
        long_items = await item_lines(long)
        long_recall = await _recall(long, build_probes(long_items)[:300], long_items)
    finally:
        await _drop(long)
    with_med, bare_med = statistics.median(with_times), statistics.median(bare_times)
    r, times, lt = runs_recall, runs_recall.times, long_recall.times
    kinds = ", ".join(f"{k} {v:.0%}" for k, v in sorted(r.by_kind.items()))
    return (
        f"| {backend} | {r.at[1]:.1%} | **{r.at[5]:.1%}** | {r.strict5:.1%} | {r.at[10]:.1%} | "
        f"{kinds} | {fmt_ms(statistics.median(times))} / {fmt_ms(_p(times, 0.95))} | "
        f"{fmt_ms(statistics.median(lt))} / **{fmt_ms(_p(lt, 0.95))}** | "
        f"{size / 1e6:.1f} MB ({size / stored:.2f}x content) | "
        f"{fmt_ms(with_med - bare_med)} ({fmt_ms(with_med)} vs {fmt_ms(bare_med)}) |"
    )


async def run(opts: Options) -> str:
    runs = load_recordings([SWEBENCH_DIR]).runs
    n_long = 2000 if opts.quick else 10000
    backends = ["memory", "sqlite", "local"] + (["postgres"] if _pg_dsn() else [])
    backends += ["s3"] if _s3_available() else []
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        if "s3" in backends:
            await stack.enter_async_context(_s3_server())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-search-"))
        base = MemoryWorkspace()
        await replay_runs(runs, context_size=16000, workspace=base)
        items = await item_lines(base)
        probes = build_probes(items)
        counts: dict[str, int] = {}
        for probe in probes:
            counts[probe.kind] = counts.get(probe.kind, 0) + 1
        for backend in backends:
            rows.append(await _backend_row(backend, Path(tmp), runs, probes, items, n_long))
    skipped = "" if _pg_dsn() else " PostgreSQL: skipped (set BENCH_PG_DSN to include it)."
    kinds = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    return (
        "## Search: recall of compressed facts, latency, index cost\n\n"
        f"{len(runs)} runs replayed at context_size=16000 into one workspace per backend: "
        f"{len(items)} offloaded items ({sum(1 for i in items if i[2] == 'context')} "
        f"messages, {sum(1 for i in items if i[2] == 'tool_result')} tool results); "
        f"{len(probes)} probes ({kinds}) searched across all sessions. Latency and index "
        f"cost on one session of {n_long:,} messages ({n_long // 20} offloads of 20 "
        f"messages).{skipped}\n\n"
        "| backend | recall@1 | recall@5 | strict recall@5 | recall@10 | recall@5 by fact | "
        f"query median / p95 (44 runs) | query median / p95 ({n_long:,} messages) | "
        "index size | write overhead per offload (with vs without index) |\n"
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":  # pragma: no cover - a quick look without the report
    import asyncio

    print(asyncio.run(run(Options(quick=True))))
