"""S3Workspace against the workspace contract, over real HTTP to an S3-protocol server.

The server is moto's server mode on loopback (``s3_endpoint``, see conftest); each test
uses its own key prefix in one bucket.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contextfold import MissingDependencyError, WorkspaceError
from contextfold.message import Msg, ToolResultBlock
from contextfold.testing import WorkspaceContract
from contextfold.testing._contract_base import PNG, image
from contextfold.workspace import BaseWorkspace, S3Workspace, _fts, _s3_client, _s3_index
from contextfold.workspace._s3_client import S3Objects
from contextfold.workspace._s3_layout import segment_key

from ..s3_server import create_bucket, s3_server
from .builtin_contract import Backend, BuiltinWorkspaceTests


class TestS3Workspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self, s3_endpoint: str, s3_bucket: str, s3_prefix: str) -> Backend:
        async def new() -> BaseWorkspace:
            ws = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
            await ws.initialize()
            return ws

        spec = {"kind": "s3", "bucket": s3_bucket, "prefix": s3_prefix, "endpoint": s3_endpoint}
        # Fewer writers than on a database: the test server handles one request at a time.
        return Backend(new=new, spec=spec, writers=8, writes=25)


async def _opened(s3_endpoint: str, s3_bucket: str, s3_prefix: str) -> AsyncIterator[S3Workspace]:
    ws = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await ws.initialize()
    yield ws
    await ws.close()


s3ws = pytest.fixture(_opened, name="s3ws")
worker = pytest.fixture(_opened, name="worker")
"""A second instance over the same bucket and prefix: another worker."""


async def _texts(ws: BaseWorkspace, session_id: str) -> list[str]:
    return [m.text for m in await ws.load_context(session_id)]


async def test_a_segment_the_index_does_not_name_yet_is_read_and_kept(
    s3ws: S3Workspace, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> None:
    # A writer that died after storing its segment, before advancing the index.
    await s3ws.offload_context("s1", [Msg("user", "first", "user")])
    await s3ws._objects.delete(["sessions/s1/context/index.json"])
    assert await _texts(s3ws, "s1") == ["first"]
    other = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await other.initialize()
    await other.offload_context("s1", [Msg("user", "second", "user")])  # segment 0 is taken
    assert await _texts(s3ws, "s1") == ["first", "second"]
    keys = [k for k, _ in await s3ws._objects.list_keys("sessions/s1/context/")]
    assert keys == ["000000000000.jsonl", "000000000001.jsonl", "index.json"]
    await other.close()


async def test_segments_are_never_overwritten(s3ws: S3Workspace) -> None:
    await s3ws.offload_context("s1", [Msg("user", "one", "user")])
    assert not await s3ws._objects.put(segment_key("s1", 0), b"clobbered\n", create=True)
    assert await _texts(s3ws, "s1") == ["one"]


async def test_session_reloads_from_the_bucket_alone(
    s3ws: S3Workspace, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> None:
    long_id = "a session id longer than the key cap " * 5
    await s3ws.offload_context(long_id, [Msg("user", "hello", "user")])
    await s3ws.offload_tool_result(long_id, ToolResultBlock(id="c", name="t", output="out"))
    await s3ws.save_state(long_id, '{"step": 3}')
    fresh = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await fresh.initialize()
    assert await fresh.list_sessions() == [long_id]
    assert await fresh.load_state(long_id) == '{"step": 3}'
    assert await _texts(fresh, long_id) == ["hello"]
    assert await fresh.list_items(long_id) == await s3ws.list_items(long_id)
    await fresh.close()


async def test_prefixes_keep_workspaces_apart(
    s3ws: S3Workspace, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> None:
    other = S3Workspace(s3_bucket, prefix=s3_prefix + "other", endpoint_url=s3_endpoint)
    await other.initialize()
    await other.offload_context("s1", [Msg("user", "elsewhere", "user")])
    await s3ws.offload_context("s2", [Msg("user", "here", "user")])
    assert (await s3ws.list_sessions(), await other.list_sessions()) == (["s2"], ["s1"])
    await other.purge("s1")
    assert await _texts(s3ws, "s2") == ["here"]
    await other.close()


async def test_blobs_are_stored_once_and_deleted(s3ws: S3Workspace) -> None:
    digest = hashlib.sha256(b"body").hexdigest()
    await s3ws.put_blob(digest, b"body")
    await s3ws.put_blob(digest, b"body")
    assert await s3ws.get_blob(digest) == b"body"
    await s3ws.delete_blobs([digest])
    assert await s3ws.get_blob(digest) is None
    with pytest.raises(ValueError, match="SHA-256"):
        await s3ws.get_blob("../state.json")


async def test_missing_bucket_is_a_clear_error(s3_endpoint: str) -> None:
    ws = S3Workspace("no-such-bucket-here", endpoint_url=s3_endpoint)
    with pytest.raises(WorkspaceError, match="no-such-bucket-here"):
        await ws.initialize()


async def test_a_server_without_conditional_writes_is_refused(s3_endpoint: str) -> None:
    with s3_server(ignore_conditions=True) as url:
        await create_bucket(url, "plain")
        with pytest.raises(WorkspaceError, match="If-None-Match"):
            await S3Workspace("plain", endpoint_url=url).initialize()


async def test_missing_credentials_are_a_clear_error(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup
    monkeypatch.setattr(_s3_client, "_SESSIONS", {})
    with pytest.raises(WorkspaceError, match="credentials"):
        await S3Workspace("contextfold-test", endpoint_url=s3_endpoint).initialize()


def test_bad_arguments_are_refused() -> None:
    for bad in ("", "a/b"):
        with pytest.raises(ValueError, match="bucket"):
            S3Workspace(bad)
    with pytest.raises(ValueError, match="prefix"):
        S3Workspace("b", prefix="../up")


async def test_missing_aiobotocore_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiobotocore.config", None)
    with pytest.raises(MissingDependencyError, match=r"contextfold\[s3\]"):
        await S3Workspace("bucket").initialize()


async def test_purge_puts_data_back_when_a_writer_references_it_meanwhile(
    s3_endpoint: str, s3_bucket: str, s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    objects = ws._objects
    delete = objects.delete

    async def racing(keys: Iterable[str]) -> None:
        """Another session's writer stores its reference just as purge deletes the data
        (having seen the data still there, it does not write it again)."""
        keys = list(keys)
        await delete(keys)
        for key in keys:
            if key.startswith("data/"):
                await objects.put(f"sessions/s2/data/{key[5:]}", b"")
                await objects.put(f"data-refs/{key[5:]}/s2", b"")

    monkeypatch.setattr(objects, "delete", racing)
    await ws.initialize()
    ref = await ws.offload_data("s1", image())
    await ws.purge("s1")
    assert await ws.read_bytes(ref) == base64.b64decode(PNG)
    assert [i.ref for i in await ws.list_items("s2")] == [ref]
    await ws.close()


# -- search: the index of each instance follows what the bucket holds ------------------------


async def _best(ws: S3Workspace, word: str, session_id: str | None = None) -> tuple[str, int, str]:
    """``(path, line, text)`` of the best hit for ``word``."""
    hit = (await ws.search(word, session_id=session_id))[0]
    if hit.kind == "context":
        text = Msg.model_validate_json(await ws.read(hit.ref, offset=hit.offset, limit=1)).text
    else:
        text = await ws.read(hit.ref)
    return hit.path, hit.offset, text


async def test_another_worker_finds_what_one_wrote_at_its_lines(
    s3ws: S3Workspace, worker: S3Workspace
) -> None:
    # Both append to one log in turns, so each one's index misses the other's segments.
    await s3ws.offload_context("s1", [Msg("user", f"alpha line{i}", "user") for i in range(2)])
    await worker.offload_context("s1", [Msg("user", "beta line2", "user")])
    await s3ws.offload_context("s1", [Msg("user", "gamma line3", "user")])
    await s3ws.offload_tool_result("s1", ToolResultBlock(id="c1", name="t", output="delta out"))
    for ws in (s3ws, worker):
        assert [await _best(ws, w) for w in ("line1", "line2", "line3", "delta")] == [
            ("sessions/s1/context.jsonl", 1, "alpha line1"),
            ("sessions/s1/context.jsonl", 2, "beta line2"),
            ("sessions/s1/context.jsonl", 3, "gamma line3"),
            ("sessions/s1/tool_result-c1.txt", 0, "delta out"),
        ]


async def test_the_index_catches_up_after_a_restart(
    s3ws: S3Workspace, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> None:
    long_id = "a session id longer than the key cap " * 5
    await s3ws.offload_context(long_id, [Msg("user", f"entry marker{i}", "user") for i in range(3)])
    await s3ws.offload_tool_result(long_id, ToolResultBlock(id="c", name="t", output="epsilon"))
    await s3ws.offload_context("other", [Msg("user", "elsewhere marker9", "user")])
    await s3ws.close()
    restarted = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await restarted.initialize()  # the index went with the old process; opening reads none
    assert restarted._search_index.side is not None
    assert restarted._search_index.side.indexed() == {}
    [hit] = await restarted.search("epsilon", session_id=long_id)
    # A session's search catches up that session only, not the rest of the bucket.
    assert {key for key, _ in restarted._search_index.side.indexed()} == {hit.ref.split("/")[1]}
    assert await restarted.read(hit.ref) == "epsilon"
    hit = (await restarted.search("marker2"))[0]
    assert (hit.offset, hit.session_id) == (2, long_id)
    assert len(restarted._search_index.side.indexed()) == 3
    await restarted.close()


async def test_another_workers_purge_and_rewrite_leave_no_stale_hit(
    s3ws: S3Workspace, worker: S3Workspace
) -> None:
    await s3ws.offload_context("s1", [Msg("user", "old words here", "user")])
    await s3ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="old result"))
    await s3ws.offload_context("s2", [Msg("user", "old in s2", "user")])
    assert len(await s3ws.search("old")) == 3
    await worker.purge("s1")
    await worker.purge("s2")
    await worker.offload_context("s1", [Msg("user", "new words, written longer", "user")])
    await worker.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="new result!"))
    assert await s3ws.search("old") == []
    assert await _best(s3ws, "written", "s1") == (
        "sessions/s1/context.jsonl",
        0,
        "new words, written longer",
    )
    assert (await _best(s3ws, "result", "s1"))[2] == "new result!"


async def test_the_index_stays_exact_as_it_follows_another_workers_purge_and_rewrite(
    s3ws: S3Workspace, worker: S3Workspace
) -> None:
    long = "needle " + "filler words " * 2_000  # longer than the text kept for its snippet
    await s3ws.offload_context("s1", [Msg("user", "old words", "user"), Msg("user", long, "user")])
    await s3ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=long))
    await s3ws.offload_context("s2", [Msg("user", "kept words", "user")])
    await worker.purge("s1")
    await worker.offload_context("s1", [Msg("user", "new words", "user")])
    await worker.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="new result"))
    assert sorted(h.snippet for h in await s3ws.search("words needle", limit=5)) == [
        "kept **words**",
        "new **words**",
    ]
    side = s3ws._search_index.side
    assert side is not None
    with contextlib.closing(sqlite3.connect(side.path)) as c:
        _fts.register(c)  # FTS5's check that the index holds the terms of its documents
        c.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")
        assert c.execute("SELECT COUNT(*) FROM search_docs").fetchone() == (3,)


async def test_own_offloads_are_indexed_as_written_not_fetched_back(
    s3ws: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        await s3ws.offload_context("s1", [Msg("user", f"entry marker{i}", "user")])
    await s3ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="zeta"))
    fetched: list[str] = []
    get_obj = S3Objects.get

    async def counting(self: S3Objects, key: str) -> tuple[bytes, str] | None:
        fetched.append(key)
        return await get_obj(self, key)

    monkeypatch.setattr(S3Objects, "get", counting)
    assert [(await s3ws.search(f"marker{i}"))[0].offset for i in range(3)] == [0, 1, 2]
    assert fetched == []  # one LIST per search, no GET: the index already held them


async def test_the_index_of_a_killed_process_is_removed_and_close_removes_its_own(
    s3_endpoint: str,
    s3_bucket: str,
    s3_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = f"contextfold-s3-{os.getpid()}-y"
    os.mkdir(tmp_path / f"contextfold-s3-{2**22 + 1}-x")  # above any pid_max: never alive
    os.mkdir(tmp_path / live)
    ws = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await ws.initialize()
    [mine] = set(os.listdir(tmp_path)) - {live}
    assert mine.startswith(f"contextfold-s3-{os.getpid()}-")
    await ws.close()
    assert os.listdir(tmp_path) == [live]


# -- search: a catch-up reads what is new, and still notices what was purged ----------------


@dataclass
class _Seen:
    """The S3 requests an instance made (operation names, in order) and the keys its
    listings returned."""

    ops: list[str] = field(default_factory=list)
    listed: int = 0


async def _parts(ws: S3Workspace, session_id: str, word: str, n: int) -> None:
    """Offload ``{word} part0`` to ``{word} part{n - 1}``, a segment each."""
    for i in range(n):
        await ws.offload_context(session_id, [Msg("user", f"{word} part{i}", "user")])


@contextmanager
def _requests(ws: S3Workspace) -> Iterator[_Seen]:
    seen = _Seen()

    def note(model: Any, parsed: dict[str, Any], **_: Any) -> None:
        seen.ops.append(model.name)
        seen.listed += len(parsed.get("Contents", []))

    events = ws._objects.client().meta.events
    events.register("after-call.s3", note)
    try:
        yield seen
    finally:
        events.unregister("after-call.s3", note)


async def test_a_search_reads_what_is_new_not_the_whole_log(
    s3ws: S3Workspace, worker: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_s3_index, "_SKIP_MIN", 4)  # the fewest segments a fleet-wide search skips
    costs = []
    for segments, word in ((6, "walrus"), (30, "pelican")):
        while (
            len(await worker._objects.list_keys("sessions/s1/context/")) <= segments
        ):  # + index.json
            await worker.offload_context("s1", [Msg("user", "filler words", "user")])
        await s3ws.search("filler", session_id="s1")
        await s3ws.search("filler")
        with _requests(s3ws) as in_session:
            await s3ws.search("filler", session_id="s1")
        with _requests(s3ws) as everywhere:
            await s3ws.search("filler")
        await worker.offload_context("s1", [Msg("user", f"news {word}", "user")])
        with _requests(s3ws) as news:
            [hit] = await s3ws.search(word, session_id="s1")
        assert hit.offset == segments
        costs.append((in_session, everywhere, news))
    # The same after 6 segments and after 30: in the session, one LIST resuming after the
    # log (it shows index.json); across sessions, the range before the log and after it;
    # with a new segment, the tail LIST and a GET of index.json and of the segment.
    expected = (
        _Seen(["ListObjectsV2"], 1),
        _Seen(["ListObjectsV2", "ListObjectsV2"], 2),
        _Seen(["ListObjectsV2", "GetObject", "GetObject"], 2),
    )
    assert costs == [expected, expected]


async def test_a_search_across_sessions_finds_what_was_stored_around_a_skipped_log(
    s3ws: S3Workspace, worker: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_s3_index, "_SKIP_MIN", 2)
    await _parts(s3ws, "m", "middle", 3)
    assert len(await s3ws.search("middle")) == 3  # indexed: the next search skips them
    # Sessions before and after it in key order, one with more keys than the gap held.
    await worker.offload_context("a", [Msg("user", "early words", "user")])
    for i in range(3):
        await worker.offload_tool_result("a", ToolResultBlock(id=f"c{i}", name="t", output="early"))
    await worker.offload_context("m", [Msg("user", "middle part3", "user")])
    await worker.offload_context("z", [Msg("user", "late words", "user")])
    hits = await s3ws.search("early middle late", limit=20)
    assert sorted((h.path, h.offset) for h in hits) == [
        ("sessions/a/context.jsonl", 0),
        ("sessions/a/tool_result-c0.txt", 0),
        ("sessions/a/tool_result-c1.txt", 0),
        ("sessions/a/tool_result-c2.txt", 0),
        *[("sessions/m/context.jsonl", i) for i in range(4)],
        ("sessions/z/context.jsonl", 0),
    ]


async def test_another_workers_purge_is_noticed_after_the_log_was_skipped(
    s3ws: S3Workspace, worker: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_s3_index, "_SKIP_MIN", 2)
    await _parts(s3ws, "s1", "doomed", 3)
    await s3ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="doomed"))
    assert [len(await s3ws.search("doomed", session_id=s)) for s in ("s1", None)] == [4, 4]
    await worker.purge("s1")
    assert [await s3ws.search("doomed", session_id=s) for s in ("s1", None)] == [[], []]


async def test_a_purge_and_rewrite_that_keeps_the_last_segments_leaves_no_stale_hit(
    s3ws: S3Workspace, worker: S3Workspace
) -> None:
    msgs = [Msg("user", text, "user") for text in ("secret plan", "second part", "third part")]
    for msg in msgs:
        await s3ws.offload_context("s1", [msg])
    assert len(await s3ws.search("secret", session_id="s1")) == 1
    # Redacted: the first segment rewritten at its length, the others byte for byte.
    await worker.purge("s1")
    for msg in [msgs[0].model_copy(update={"content": "public plan"}), *msgs[1:]]:
        await worker.offload_context("s1", [msg])
    for session_id in ("s1", None):
        assert await s3ws.search("secret", session_id=session_id) == []
        assert [h.offset for h in await s3ws.search("public", session_id=session_id)] == [0]


async def test_the_segment_index_names_its_log_until_a_purge(s3ws: S3Workspace) -> None:
    async def index() -> Any:
        got = await s3ws._objects.get("sessions/s1/context/index.json")
        assert got is not None
        return json.loads(got[0])

    await s3ws.offload_context("s1", [Msg("user", "one", "user")])
    first = await index()
    await s3ws.offload_context("s1", [Msg("user", "two", "user")])
    assert await index() == {"segments": 2, "log": first["log"]}
    await s3ws.purge("s1")
    await s3ws.offload_context("s1", [Msg("user", "again", "user")])
    again = await index()
    assert again["segments"] == 1
    assert again["log"] != first["log"]


async def test_a_log_an_older_writer_indexed_is_caught_up_by_listing(
    s3ws: S3Workspace, worker: S3Workspace
) -> None:
    await worker.offload_context("s1", [Msg("user", "first words", "user")])
    await worker._objects.put("sessions/s1/context/index.json", b'{"segments": 1}')  # no "log"
    assert [h.offset for h in await s3ws.search("first", session_id="s1")] == [0]
    await worker.offload_context("s1", [Msg("user", "second words", "user")])  # names a log
    assert sorted(h.offset for h in await s3ws.search("words", session_id="s1")) == [0, 1]
    await worker.purge("s1")
    await worker.offload_context("s1", [Msg("user", "other words", "user")])
    await worker._objects.put("sessions/s1/context/index.json", b'{"segments": 1}')
    hits = await s3ws.search("words", session_id="s1")
    assert [(h.offset, h.snippet) for h in hits] == [(0, "other **words**")]


async def test_a_purge_deletes_the_logs_id_before_its_segments(
    s3ws: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _parts(s3ws, "s1", "purged", 2)
    deleted: list[list[str]] = []
    delete = S3Objects.delete

    async def recording(self: S3Objects, keys: Iterable[str]) -> None:
        deleted.append(sorted(keys))
        await delete(self, deleted[-1])

    monkeypatch.setattr(S3Objects, "delete", recording)
    await s3ws.purge("s1")
    assert deleted == [
        ["sessions/s1/context/index.json"],  # failing halfway, no id vouches for what went
        [f"sessions/s1/context/00000000000{i}.jsonl" for i in range(2)]
        + ["sessions/s1/context/index.json"],
    ]
